#include "rpc/streaming_framed_transport.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include <thrift/transport/TTransportException.h>

namespace pw::rpc {

namespace {

using apache::thrift::transport::TTransportException;

constexpr std::size_t kReadAhead = 64 * 1024;
// With nothing buffered, reads at least this large skip the read-ahead buffer.
constexpr uint32_t kDirectReadAtLeast = 16 * 1024;
constexpr std::size_t kPrefix = 4;
// Writes at least this large are sent from the caller's memory rather than copied.
constexpr uint32_t kReferenceAtLeast = 16 * 1024;

}  // namespace

StreamingFramedTransport::StreamingFramedTransport(std::shared_ptr<apache::thrift::transport::TTransport> inner,
                                                   std::shared_ptr<apache::thrift::TConfiguration> config)
    : TVirtualTransport(config),
      inner_(std::move(inner)),
      max_frame_bytes_(static_cast<uint32_t>(config->getMaxFrameSize())),
      read_buffer_(kReadAhead),
      write_buffer_(kPrefix) {}

void StreamingFramedTransport::fill() {
  if (!fill_unless_closed()) throw TTransportException(TTransportException::END_OF_FILE, "the peer closed the connection");
}

bool StreamingFramedTransport::fill_unless_closed() {
  if (read_pos_ == read_end_) {
    read_pos_ = read_end_ = 0;
  } else if (read_pos_ > 0) {
    std::memmove(read_buffer_.data(), read_buffer_.data() + read_pos_, buffered());
    read_end_ -= read_pos_;
    read_pos_ = 0;
  }
  const uint32_t got =
      inner_->read(read_buffer_.data() + read_end_, static_cast<uint32_t>(read_buffer_.size()) - read_end_);
  read_end_ += got;
  return got > 0;
}

void StreamingFramedTransport::start_frame() {
  while (buffered() < kPrefix) fill();
  const uint8_t* p = read_buffer_.data() + read_pos_;
  const auto size = static_cast<int32_t>((uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]);
  read_pos_ += kPrefix;
  if (size < 0)
    throw TTransportException(TTransportException::CORRUPTED_DATA, "frame size " + std::to_string(size) + " is negative");
  if (static_cast<uint32_t>(size) > max_frame_bytes_)
    throw TTransportException(TTransportException::CORRUPTED_DATA,
                              "received an oversized frame of " + std::to_string(size) + " bytes (maximum " +
                                  std::to_string(max_frame_bytes_) + ")");
  resetConsumedMessageSize();
  resetConsumedMessageSize(size);
  frame_size_ = frame_left_ = static_cast<uint32_t>(size);
}

uint32_t StreamingFramedTransport::read(uint8_t* buf, uint32_t len) {
  if (len == 0) return 0;
  if (frame_left_ == 0) {
    // A clean end of stream between frames reads as 0 bytes, like TFramedTransport. (A read, not
    // TSocket::peek, which reports a receive timeout as an unknown error.)
    if (buffered() == 0 && !fill_unless_closed()) return 0;
    do start_frame();
    while (frame_left_ == 0);
  }
  const uint32_t want = std::min(len, frame_left_);
  uint32_t got = 0;
  if (buffered() == 0 && want >= kDirectReadAtLeast) {
    got = inner_->read(buf, want);
    if (got == 0) throw TTransportException(TTransportException::END_OF_FILE, "the peer closed the connection mid-frame");
  } else {
    if (buffered() == 0) fill();
    got = std::min(want, buffered());
    std::memcpy(buf, read_buffer_.data() + read_pos_, got);
    read_pos_ += got;
  }
  frame_left_ -= got;
  countConsumedMessageBytes(got);
  return got;
}

uint32_t StreamingFramedTransport::readEnd() { return frame_size_ + static_cast<uint32_t>(kPrefix); }

const uint8_t* StreamingFramedTransport::borrow(uint8_t* /*buf*/, uint32_t* len) {
  const uint32_t available = std::min(buffered(), frame_left_);
  if (available == 0 || *len > available) return nullptr;
  *len = available;
  return read_buffer_.data() + read_pos_;
}

void StreamingFramedTransport::consume(uint32_t len) {
  if (len > std::min(buffered(), frame_left_))
    throw TTransportException(TTransportException::BAD_ARGS, "consumed more than was borrowed");
  read_pos_ += len;
  frame_left_ -= len;
  countConsumedMessageBytes(len);
}

void StreamingFramedTransport::write(const uint8_t* buf, uint32_t len) {
  if (len >= kReferenceAtLeast) external_.push_back(External{buf, len, write_buffer_.size()});
  else write_buffer_.insert(write_buffer_.end(), buf, buf + len);
  written_ += len;
}

void StreamingFramedTransport::forget_writes() {
  write_buffer_.resize(kPrefix);
  external_.clear();
  written_ = 0;
}

void StreamingFramedTransport::flush() {
  struct Reset {
    StreamingFramedTransport& t;
    ~Reset() { t.forget_writes(); }
  } reset{*this};
  if (written_ > static_cast<std::size_t>(INT32_MAX))
    throw TTransportException(TTransportException::CORRUPTED_DATA,
                              "frame of " + std::to_string(written_) + " bytes is too large");
  const auto n = static_cast<uint32_t>(written_);
  write_buffer_[0] = static_cast<uint8_t>(n >> 24);
  write_buffer_[1] = static_cast<uint8_t>(n >> 16);
  write_buffer_[2] = static_cast<uint8_t>(n >> 8);
  write_buffer_[3] = static_cast<uint8_t>(n);
  std::size_t from = 0;   // write_buffer_ bytes before this are sent
  for (const External& e : external_) {
    if (e.at > from) inner_->write(write_buffer_.data() + from, static_cast<uint32_t>(e.at - from));
    inner_->write(e.data, e.size);
    from = e.at;
  }
  if (write_buffer_.size() > from)
    inner_->write(write_buffer_.data() + from, static_cast<uint32_t>(write_buffer_.size() - from));
  inner_->flush();
}

}  // namespace pw::rpc
