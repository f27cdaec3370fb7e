#include "util/fs.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>  // renameat2
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "util/error.h"

namespace drama {

namespace fs = std::filesystem;

std::vector<uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path.string() + ": " + std::strerror(errno));
  std::vector<uint8_t> out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw Error("cannot read " + path.string());
  return out;
}

std::string read_text_file(const fs::path& path) {
  auto b = read_file(path);
  return std::string(b.begin(), b.end());
}

void fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void write_directory_atomic(const fs::path& dir, const std::function<void(const fs::path&)>& fill) {
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  const fs::path tmp =
      parent / ("." + dir.filename().string() + ".partial-" + std::to_string(::getpid()));
  if (!fs::create_directory(tmp))
    throw Error("cannot create the temporary directory " + tmp.string() + " (it exists)");
  try {
    fill(tmp);
    fsync_directory(tmp);
    // RENAME_NOREPLACE: a directory that appeared meanwhile is never replaced.
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE) != 0)
      throw Error("cannot rename " + tmp.string() + " to " + dir.string() + ": " +
                  std::strerror(errno));
    fsync_directory(parent);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // only the directory this call created
    throw;
  }
}

void write_file_atomic(const fs::path& path, std::span<const uint8_t> bytes) {
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  std::random_device rd;
  const fs::path tmp = dir / ("." + path.filename().string() + ".tmp-" + std::to_string(rd()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create " + tmp.string() + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error("cannot write " + path.string() + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error("cannot write " + path.string() + ": " + why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error("cannot write " + path.string() + ": " + why);
  }
  fsync_directory(dir);
}

void write_text_file_atomic(const fs::path& path, const std::string& text) {
  write_file_atomic(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1)
    throw Error("OpenSSL SHA-256 initialisation failed");
}

Sha256::~Sha256() {
  EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_));
}

void Sha256::update(const void* data, size_t bytes) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, bytes);
}

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), md, &len);
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += digits[md[i] >> 4];
    out += digits[md[i] & 15];
  }
  return out;
}

std::string sha256_hex(std::span<const uint8_t> bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

std::string sha256_file(const fs::path& path, const std::function<void(uint64_t)>& on_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open " + path.string() + ": " + std::strerror(errno));
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  Sha256 h;
  std::vector<uint8_t> buf(4 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw Error("cannot read " + path.string() + ": " + why);
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
    if (on_bytes) on_bytes(static_cast<uint64_t>(n));
  }
  ::close(fd);
  return h.hex();
}

}  // namespace drama
