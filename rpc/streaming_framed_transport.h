#pragma once
// Thrift's framed transport (a 4-byte big-endian length, then the message)
// without buffering whole frames: small reads come from a read-ahead buffer, large ones go from
// the socket straight into the caller's memory (a tensor's bytes are copied once, not twice),
// and no buffer grows to the size of the largest frame. Frames over the maximum size close the
// connection before their body is read, as TFramedTransport does. Writes make one frame, sent on
// flush(): small ones are copied into a buffer, large ones (a tensor's or a push's bytes) are not
// copied at all -- the transport keeps a pointer to them and writes them straight to the socket.
// So a writer must flush before the bytes it wrote die, as the generated processors and clients
// and pipewright's own writers do (serialize, then flush, within one call), and one whose
// serialization fails must close() or destroy the transport, which forgets the pointers.
// Servers, peer links and parameter-server clients use it.
#include <cstdint>
#include <memory>
#include <vector>

#include <thrift/TConfiguration.h>
#include <thrift/transport/TVirtualTransport.h>

namespace pw::rpc {

class StreamingFramedTransport
    : public apache::thrift::transport::TVirtualTransport<StreamingFramedTransport> {
 public:
  StreamingFramedTransport(std::shared_ptr<apache::thrift::transport::TTransport> inner,
                           std::shared_ptr<apache::thrift::TConfiguration> config);

  bool isOpen() const override { return inner_->isOpen(); }
  bool peek() override { return read_pos_ < read_end_ || inner_->peek(); }
  void open() override { inner_->open(); }
  void close() override {
    forget_writes();
    inner_->close();
  }

  uint32_t read(uint8_t* buf, uint32_t len);
  uint32_t readEnd() override;
  // Only bytes already buffered and inside the current frame can be borrowed.
  const uint8_t* borrow(uint8_t* buf, uint32_t* len);
  void consume(uint32_t len);

  void write(const uint8_t* buf, uint32_t len);
  void flush() override;
  uint32_t writeEnd() override { return static_cast<uint32_t>(written_ + 4); }   // with the length prefix

  const std::string getOrigin() const override { return inner_->getOrigin(); }

 private:
  uint32_t buffered() const { return read_end_ - read_pos_; }
  void fill();                 // at least one more byte into the read-ahead buffer, or throws at EOF
  bool fill_unless_closed();   // the same, or false at EOF
  void start_frame();   // reads the next length prefix and checks it
  void forget_writes();

  // A large write: the caller's bytes, which go after the first `at` bytes of write_buffer_.
  struct External {
    const uint8_t* data;
    uint32_t size;
    std::size_t at;
  };

  std::shared_ptr<apache::thrift::transport::TTransport> inner_;
  uint32_t max_frame_bytes_;
  std::vector<uint8_t> read_buffer_;
  uint32_t read_pos_ = 0;
  uint32_t read_end_ = 0;
  uint32_t frame_left_ = 0;   // body bytes of the current frame not yet handed out
  uint32_t frame_size_ = 0;
  std::vector<uint8_t> write_buffer_;   // starts with room for the length prefix
  std::vector<External> external_;      // in the order they were written
  std::size_t written_ = 0;             // body bytes of the frame so far
};

class StreamingFramedTransportFactory : public apache::thrift::transport::TTransportFactory {
 public:
  explicit StreamingFramedTransportFactory(std::shared_ptr<apache::thrift::TConfiguration> config)
      : config_(std::move(config)) {}
  std::shared_ptr<apache::thrift::transport::TTransport> getTransport(
      std::shared_ptr<apache::thrift::transport::TTransport> inner) override {
    return std::make_shared<StreamingFramedTransport>(std::move(inner), config_);
  }

 private:
  std::shared_ptr<apache::thrift::TConfiguration> config_;
};

}  // namespace pw::rpc
