/// @file common.h
/// @brief Element types, reduction ops and algorithm names shared by every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define CC_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define CC_HOST_DEVICE inline
#endif

/// Public types keep default visibility so that exceptions and polymorphic classes are the
/// same type in every module that links the library (the Python modules hide the rest).
#define CC_API __attribute__((visibility("default")))

namespace ccompress {

/// Element type of a user tensor (or of a raw wire format).
enum class DType : uint8_t { Float32 = 0, BFloat16 = 1, Float16 = 2 };

/// Bytes per element of @p t.
inline size_t dtype_size(DType t) { return t == DType::Float32 ? 4 : 2; }
/// "float32", "bfloat16" or "float16".
const char* dtype_name(DType t);
/// Parses "float32", "bfloat16" or "float16"; throws InvalidArgument naming the
/// supported types otherwise.
DType parse_dtype(const std::string& s);

/// Reduction applied by all-reduce and reduce-scatter.
enum class ReduceOp : uint8_t { Sum = 0, Avg = 1 };
const char* reduce_op_name(ReduceOp op);
/// Parses "sum" or "avg"; throws InvalidArgument otherwise.
ReduceOp parse_reduce_op(const std::string& s);

/// All-reduce schedules (docs/algorithms.md, "Schedules").
/// Hier: exact (or intra-codec) reduce-scatter inside each node, a flat all-reduce of each
/// shard between nodes, an all-gather inside each node (collectives/hier.cc).
enum class Algo : uint8_t { Auto = 0, Ring = 1, TwoShot = 2, Tree = 3, OneShot = 4, Hier = 5 };
const char* algo_name(Algo a);
/// Parses "auto", "ring", "two_shot", "tree", "one_shot" or "hier"; throws InvalidArgument
/// otherwise.
Algo parse_algo(const std::string& s);

/// Library version string.
const char* version();

}  // namespace ccompress
