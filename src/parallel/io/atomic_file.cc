#include "parallel/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace cc::parallel {
namespace {

Status failure(const std::string& what, const std::string& path, int error) {
  return Status(ccSystemError, what + " " + path + ": " + std::strerror(error));
}

// Closes the descriptor when it goes out of scope (error paths included).
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

}  // namespace

Status writeFileAtomically(const std::string& path, std::string_view contents) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  FileDescriptor file(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (file.get() < 0) return failure("create", temporary, errno);
  size_t written = 0;
  while (written < contents.size()) {
    const ssize_t n = ::write(file.get(), contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::unlink(temporary.c_str());
      return failure("write", temporary, error);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(file.get()) != 0 || ::close(file.release()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    return failure("fsync", temporary, error);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    return failure("rename to", path, error);
  }
  // The rename itself is durable only once the directory is synced.
  std::string directory = std::filesystem::path(path).parent_path().string();
  if (directory.empty()) directory = ".";
  FileDescriptor dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) ::fsync(dir.get());
  return Status::ok();
}

}  // namespace cc::parallel
