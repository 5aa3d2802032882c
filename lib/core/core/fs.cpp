#include "core/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/check.h"

namespace trainer::fs {

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_dirs(const std::string& path) {
  if (path.empty() || is_dir(path)) return;
  std::string cur;
  for (const auto& part : split(path, '/')) {
    cur += part;
    if (!cur.empty() && !is_dir(cur)) {
      if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        TRAINER_FAIL("cannot create folder ", cur, ": ", std::strerror(errno));
    }
    cur += "/";
  }
  TRAINER_CHECK(is_dir(path), "cannot create folder ", path);
}

namespace {
int remove_entry(const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }
}  // namespace

void remove_tree(const std::string& path) {
  if (!exists(path)) return;
  ::nftw(path.c_str(), remove_entry, 64, FTW_DEPTH | FTW_PHYS);
}

std::vector<std::string> list_dir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  TRAINER_CHECK(d, "cannot read folder ", path, ": ", std::strerror(errno));
  std::vector<std::string> out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

int64_t file_size(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty() || (!b.empty() && b[0] == '/')) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

std::string absolute_path(const std::string& p) {
  if (char* r = ::realpath(p.c_str(), nullptr)) {
    std::string out(r);
    ::free(r);
    return out;
  }
  if (!p.empty() && p[0] == '/') return p;
  char cwd[4096];
  return ::getcwd(cwd, sizeof(cwd)) ? join_path(cwd, p) : p;
}

std::string parent_path(const std::string& p) {
  const size_t s = p.rfind('/');
  if (s == std::string::npos) return ".";
  return s == 0 ? "/" : p.substr(0, s);
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TRAINER_CHECK(fd >= 0, "cannot create ", tmp, ": ", std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    ssize_t w = ::write(fd, text.data() + off, text.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      TRAINER_FAIL("cannot write ", tmp, ": ", why);
    }
    off += static_cast<size_t>(w);
  }
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    TRAINER_FAIL("cannot write ", path, ": ", why);
  }
}

std::string read_text(const std::string& path) {
  TRAINER_CHECK(!is_dir(path), path, ": is a folder, expected a file");
  std::ifstream f(path, std::ios::binary);
  TRAINER_CHECK(f.good(), "cannot read ", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

size_t pread_full(int fd, int64_t offset, size_t n, uint8_t* dst) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

bool is_writable_dir(const std::string& path) {
  if (!is_dir(path)) return false;
  const std::string probe = join_path(path, ".trainer_write_probe");
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  ::close(fd);
  ::unlink(probe.c_str());
  return true;
}

}  // namespace trainer::fs
