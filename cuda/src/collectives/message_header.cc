#include "collectives/message_header.h"

#include <cstring>

#include "ccompress/error.h"

namespace ccompress {

namespace {

void put(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = uint8_t(v >> (8 * i));
}

uint64_t get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

const char* dtype_label(uint32_t d) {
  return d <= uint32_t(DType::Float16) ? dtype_name(DType(d)) : "an unknown dtype";
}

}  // namespace

MessageHeader make_message_header(const Codec& codec, DType dtype, int64_t count,
                                  uint64_t call) {
  CC_CHECK(count >= 0 && count <= int64_t(UINT32_MAX),
           "a message of " << count << " elements does not fit the message header's 32-bit "
                           << "count; use a smaller slice_elems");
  MessageHeader h;
  h.dtype = uint8_t(dtype);
  h.codec_id = codec.id();
  h.count = uint32_t(count);
  h.call = uint32_t(call);
  return h;
}

void write_message_header(const MessageHeader& h, void* dst) {
  uint8_t b[kMessageHeaderBytes];
  put(b, h.magic, 2);
  put(b + 2, h.version, 1);
  put(b + 3, h.dtype, 1);
  put(b + 4, h.codec_id, 4);
  put(b + 8, h.count, 4);
  put(b + 12, h.call, 4);
  std::memcpy(dst, b, sizeof b);
}

MessageHeader read_message_header(const void* src) {
  uint8_t b[kMessageHeaderBytes];
  std::memcpy(b, src, sizeof b);
  MessageHeader h;
  h.magic = uint16_t(get(b, 2));
  h.version = uint8_t(get(b + 2, 1));
  h.dtype = uint8_t(get(b + 3, 1));
  h.codec_id = uint32_t(get(b + 4, 4));
  h.count = uint32_t(get(b + 8, 4));
  h.call = uint32_t(get(b + 12, 4));
  return h;
}

void check_message_header(const MessageHeader& got, const MessageHeader& want, int peer) {
  std::string from = peer >= 0 ? "message from rank " + std::to_string(peer) : "message";
  CC_CHECK_AS(MessageError, got.magic == want.magic,
              "malformed " << from << ": header magic 0x" << std::hex << got.magic
                           << ", expected 0x" << want.magic << std::dec
                           << " (not a ccompress message, or corrupted in transit)");
  CC_CHECK_AS(MessageError, got.version == want.version,
              "malformed " << from << ": header version " << int(got.version) << ", expected "
                           << int(want.version) << "; all ranks must run the same ccompress");
  CC_CHECK_AS(MessageError, got.dtype == want.dtype,
              "malformed " << from << ": header dtype " << dtype_label(got.dtype)
                           << ", expected " << dtype_label(want.dtype));
  CC_CHECK_AS(MessageError, got.codec_id == want.codec_id,
              "malformed " << from << ": header codec id 0x" << std::hex << got.codec_id
                           << ", expected 0x" << want.codec_id << std::dec
                           << " (encoded with another codec)");
  CC_CHECK_AS(MessageError, got.count == want.count,
              "malformed " << from << ": header count " << got.count << " elements, expected "
                           << want.count);
  CC_CHECK_AS(MessageError, got.call == want.call,
              "malformed " << from << ": header call " << got.call << ", expected call "
                           << want.call << " (a message of another collective)");
}

}  // namespace ccompress
