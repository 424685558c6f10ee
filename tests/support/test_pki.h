#pragma once
// A throw-away public-key infrastructure for TLS tests, made with the `openssl` command (Debian's
// openssl package, in scripts/setup.sh) in a folder of its own: the job's CA and a host
// certificate it signed, and a foreign CA with a certificate of its own (a peer that does not
// belong to the job). EC P-256 keys, valid for two days.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace pw::test {

class TestPki {
 public:
  explicit TestPki(const std::string& tag)
      : dir_(std::filesystem::temp_directory_path() / ("pw_pki_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
    make_ca("ca");
    make_ca("foreign-ca");
    make_host("host", "ca");
    make_host("stranger", "foreign-ca");
  }
  ~TestPki() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  // The job's CA, and a host of the job.
  std::string ca() const { return file("ca.pem"); }
  std::string cert() const { return file("host.pem"); }
  std::string key() const { return file("host.key"); }
  // A peer whose certificate another CA signed, and that CA.
  std::string foreign_ca() const { return file("foreign-ca.pem"); }
  std::string stranger_cert() const { return file("stranger.pem"); }
  std::string stranger_key() const { return file("stranger.key"); }
  // `pipewright train` / `launch` flags for the job's host.
  std::string flags() const { return "--tls-cert " + cert() + " --tls-key " + key() + " --tls-ca " + ca() + " "; }

 private:
  void run(const std::string& command) const {
    const std::string line = "cd " + dir_.string() + " && " + command + " >>openssl.log 2>&1";
    if (std::system(line.c_str()) != 0) throw std::runtime_error("test PKI: failed: " + command);
  }
  void make_ca(const std::string& name) const {
    run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=pw-" + name +
        " -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign -keyout " + name +
        ".key -out " + name + ".pem");
  }
  void make_host(const std::string& name, const std::string& ca) const {
    run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=pw-" + name + " -keyout " + name +
        ".key -out " + name + ".csr");
    run("openssl x509 -req -days 2 -in " + name + ".csr -CA " + ca + ".pem -CAkey " + ca + ".key -CAcreateserial -out " +
        name + ".pem");
  }

  std::filesystem::path dir_;
};

}  // namespace pw::test
