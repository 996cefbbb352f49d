#include "atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace fleetlink::agent {

namespace fs = std::filesystem;

namespace {

Error io_error(const std::string& what, const fs::path& p, int err) {
  return make_error(Errc::io, what + " " + p.string() + ": " + std::strerror(err));
}

bool write_all(int fd, const std::uint8_t* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace

Expected<void> write_file_atomic(const fs::path& path, const Bytes& data) {
  const fs::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return io_error("cannot create", tmp, errno);
  if (!write_all(fd, data.data(), data.size()) || ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return io_error("cannot write", tmp, err);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return io_error("cannot rename onto", path, err);
  }
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return io_error("cannot open directory", dir, errno);
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return io_error("cannot fsync directory", dir, err);
  return {};
}

Expected<Bytes> read_file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot read", path, errno ? errno : ENOENT);
  Bytes b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return b;
}

}  // namespace fleetlink::agent
