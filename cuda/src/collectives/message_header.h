// The header in front of every payload message of a collective. The sender writes it just
// before the encoded bytes; the receiver checks every field against what its own plan
// expects before anything decodes the payload, so a message of another call, another
// codec, another size or another library version is reported instead of being decoded
// into garbage. 16 bytes, little-endian, independent of the host's struct layout:
//
//   offset  size  field
//        0     2  magic    0x4D43 ("CM")
//        2     1  version  kMessageVersion
//        3     1  dtype    the call's input dtype (DType)
//        4     4  codec    Codec::id() of the bound codec (FNV-1a of its canonical name)
//        8     4  count    elements encoded in the payload
//       12     4  call     the collective's sequence number on this communicator (mod 2^32)
//
// The payload that follows is exactly codec.wire_bytes(count) bytes; codec.wire_bytes never
// includes the header. Host code only: the GPU path writes and checks the same 16 bytes.
#pragma once

#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/common.h"

namespace ccompress {

constexpr int64_t kMessageHeaderBytes = 16;
constexpr uint16_t kMessageMagic = 0x4D43;
constexpr uint8_t kMessageVersion = 1;

/// The decoded fields of a message header.
struct MessageHeader {
  uint16_t magic = kMessageMagic;
  uint8_t version = kMessageVersion;
  uint8_t dtype = 0;
  uint32_t codec_id = 0;
  uint32_t count = 0;
  uint32_t call = 0;
};

/// The header a rank sends for @p count elements of @p codec (bound) in call @p call.
/// Throws InvalidArgument when count does not fit the 32-bit field (use a smaller slice).
MessageHeader make_message_header(const Codec& codec, DType dtype, int64_t count,
                                  uint64_t call);

/// Writes @p h as its 16 wire bytes at @p dst.
void write_message_header(const MessageHeader& h, void* dst);
/// Reads the 16 bytes at @p src.
MessageHeader read_message_header(const void* src);

/// Throws MessageError naming the first field of @p got that differs from @p want, the peer
/// (-1: unknown) and both values. The magic and version are checked first, so bytes that are
/// not a header at all are reported as such.
void check_message_header(const MessageHeader& got, const MessageHeader& want, int peer);

}  // namespace ccompress
