// What a namespace stores its blocks in. Requests complete asynchronously through a
// callback (the file backend finishes on a later reactor turn; null and RAM inline).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "nvtcp/status.hpp"
#include "reactor/reactor.hpp"

namespace nvtcp::backend {

struct BlockIo {
  enum class Op : uint8_t { Read, Write, Flush, WriteZeroes, Deallocate };
  Op op = Op::Read;
  uint64_t offset = 0;        // bytes
  uint64_t length = 0;        // bytes
  uint8_t* buffer = nullptr;  // Write: data to store. Read: where to put data if copying.
  // Read: a device that can serve data without a copy points this at it (valid until the
  // request's data has been sent); otherwise it fills buffer and sets read_data = buffer.
  const uint8_t* read_data = nullptr;
  void (*done)(BlockIo* io, wire::Status status) = nullptr;
  void* user = nullptr;       // the submitter's context for done
  // Device-private state for devices that go through io_uring (partial transfers resume).
  reactor::OwnedCompletion<BlockIo> completion;
  class BlockDevice* device = nullptr;
  reactor::Reactor* reactor = nullptr;
  uint64_t progress = 0;
};

class BlockDevice {
 public:
  virtual ~BlockDevice() = default;
  virtual uint64_t size_bytes() const = 0;
  virtual uint32_t block_size() const = 0;
  virtual const char* kind() const = 0;
  // Read needs a caller buffer only when this is false.
  virtual bool zero_copy_reads() const { return false; }
  // Runs on the calling reactor's thread; io->done is called exactly once.
  virtual void submit(BlockIo* io, reactor::Reactor& r) = 0;
};

// Parses "512", "4K", "1G", "1T" (binary units) into bytes; false on junk.
bool parse_size(const std::string& text, uint64_t& out);

std::unique_ptr<BlockDevice> make_null(uint64_t size, uint32_t block_size);
// reactors: how many reactor threads submit to it (more than one: commands on the same
// blocks are made atomic per block, and reads copy).
std::unique_ptr<BlockDevice> make_ram(uint64_t size, uint32_t block_size, unsigned reactors, std::string& err);
// Opens a regular file or block device (O_DIRECT when the device allows it). size 0 means
// "the file's size"; a regular file smaller than size is extended.
std::unique_ptr<BlockDevice> make_file(const std::string& path, uint64_t size, uint32_t block_size,
                                       std::string& err);

}  // namespace nvtcp::backend
