#include "net/identity.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/text_file.h"
#include "net/openssl_errors.h"

namespace tessera::net {
namespace {

constexpr long kValiditySeconds = 10L * 365 * 24 * 3600;
// Certificates start an hour in the past so that peers whose clocks run a little
// behind accept them at once.
constexpr long kBackdateSeconds = 3600;
// RFC 5280 caps the serial at 20 octets; 159 random bits stay positive within it.
constexpr int kSerialBits = 159;
// ub-common-name (RFC 5280).
constexpr size_t kMaxCommonName = 64;

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct BnFree {
  void operator()(BIGNUM* bn) const { BN_free(bn); }
};
struct ExtFree {
  void operator()(X509_EXTENSION* ext) const { X509_EXTENSION_free(ext); }
};

Status openssl_failure(std::string_view what) { return Status::internal(std::string(what) + ": " + openssl_errors()); }

Status add_extension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, ExtFree> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1)
    return openssl_failure(std::string("certificate extension ") + value);
  return {};
}

Result<std::unique_ptr<X509, X509Free>> make_self_signed(EVP_PKEY* key, const std::string& name) {
  std::unique_ptr<X509, X509Free> cert(X509_new());
  if (!cert || X509_set_version(cert.get(), X509_VERSION_3) != 1) return openssl_failure("X509_new");

  std::unique_ptr<BIGNUM, BnFree> serial(BN_new());
  if (!serial || BN_rand(serial.get(), kSerialBits, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get())) == nullptr) {
    return openssl_failure("certificate serial");
  }
  if (X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kBackdateSeconds) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert.get()), kValiditySeconds) == nullptr) {
    return openssl_failure("certificate validity");
  }
  X509_NAME* subject = X509_get_subject_name(cert.get());
  if (X509_NAME_add_entry_by_NID(subject, NID_commonName, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(name.data()), static_cast<int>(name.size()), -1,
                                 0) != 1 ||
      X509_set_issuer_name(cert.get(), subject) != 1 || X509_set_pubkey(cert.get(), key) != 1) {
    return openssl_failure("certificate subject");
  }
  TS_RETURN_IF_ERROR(add_extension(cert.get(), NID_basic_constraints, "critical,CA:FALSE"));
  TS_RETURN_IF_ERROR(add_extension(cert.get(), NID_key_usage, "critical,digitalSignature"));
  TS_RETURN_IF_ERROR(add_extension(cert.get(), NID_ext_key_usage, "serverAuth,clientAuth"));
  TS_RETURN_IF_ERROR(add_extension(cert.get(), NID_subject_key_identifier, "hash"));
  // Ed25519 signs the message itself: no separate digest.
  if (X509_sign(cert.get(), key, nullptr) <= 0) return openssl_failure("signing the certificate");
  return cert;
}

std::string bio_contents(BIO* bio) {
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : std::string();
}

// Writes bytes to a new file; O_EXCL refuses an existing one. Removes a partly
// written file.
Status write_new_file(const std::filesystem::path& path, const std::string& bytes, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0 && errno == EEXIST) {
    return Status::invalid_input(path.string() + ": already exists; refusing to overwrite a node's key");
  }
  if (fd < 0) return Status::invalid_input(path.string() + ": cannot create: " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(path.c_str());
      return Status::invalid_input(path.string() + ": write failed: " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(path.c_str());
    return Status::invalid_input(path.string() + ": write failed: " + std::strerror(errno));
  }
  return {};
}

Result<std::string> read_file(const std::filesystem::path& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) return Status::not_found(path.string() + ": does not exist");
  return read_text_file(path.string(), uint64_t{1} << 20);  // a PEM key or certificate
}

std::unique_ptr<BIO, BioFree> memory_bio(const std::string& text) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

}  // namespace

std::string certificate_fingerprint(X509* cert) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (cert == nullptr || X509_digest(cert, EVP_sha256(), digest, &length) != 1) return "";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::string certificate_common_name(X509* cert) {
  if (cert == nullptr) return "";
  X509_NAME* subject = X509_get_subject_name(cert);
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  // Two CNs would let a certificate name two nodes; such a certificate names none.
  if (index < 0 || X509_NAME_get_index_by_NID(subject, NID_commonName, index) >= 0) return "";
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
  unsigned char* utf8 = nullptr;
  const int length = ASN1_STRING_to_UTF8(&utf8, data);
  if (length < 0) return "";
  std::string out(reinterpret_cast<const char*>(utf8), static_cast<size_t>(length));
  OPENSSL_free(utf8);
  return out;
}

Status write_identity(const std::filesystem::path& dir, const std::string& name) {
  if (name.empty() || name.size() > kMaxCommonName) {
    return Status::invalid_input("node name '" + name + "': must be 1.." + std::to_string(kMaxCommonName) + " bytes");
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return Status::invalid_input(dir.string() + ": cannot create: " + error.message());
  const std::filesystem::path key_path = dir / "key.pem", cert_path = dir / "cert.pem";
  if (std::filesystem::exists(key_path, error)) {
    return Status::invalid_input(key_path.string() + ": already exists; refusing to overwrite a node's key");
  }

  ERR_clear_error();
  std::unique_ptr<EVP_PKEY, PkeyFree> key(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
  if (!key) return openssl_failure("Ed25519 key generation");
  TS_ASSIGN_OR_RETURN(auto cert, make_self_signed(key.get(), name));

  std::unique_ptr<BIO, BioFree> key_pem(BIO_new(BIO_s_mem())), cert_pem(BIO_new(BIO_s_mem()));
  if (!key_pem || !cert_pem ||
      PEM_write_bio_PrivateKey(key_pem.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1 ||
      PEM_write_bio_X509(cert_pem.get(), cert.get()) != 1) {
    return openssl_failure("PEM encoding");
  }
  TS_RETURN_IF_ERROR(write_new_file(key_path, bio_contents(key_pem.get()), 0600));

  // The certificate is public; a stale one from an earlier key is replaced.
  const std::filesystem::path temp_path = dir / "cert.pem.tmp";
  std::filesystem::remove(temp_path, error);
  Status written = write_new_file(temp_path, bio_contents(cert_pem.get()), 0644);
  if (written.ok()) {
    std::filesystem::rename(temp_path, cert_path, error);
    if (error) written = Status::invalid_input(cert_path.string() + ": cannot write: " + error.message());
  }
  if (!written.ok()) {
    std::filesystem::remove(key_path, error);  // no key without its certificate
    return written;
  }
  return {};
}

Result<Identity> load_identity(const std::filesystem::path& dir) {
  const std::filesystem::path key_path = dir / "key.pem", cert_path = dir / "cert.pem";
  TS_ASSIGN_OR_RETURN(const std::string key_text, read_file(key_path));
  TS_ASSIGN_OR_RETURN(const std::string cert_text, read_file(cert_path));

  ERR_clear_error();
  auto key_bio = memory_bio(key_text);
  std::shared_ptr<EVP_PKEY> key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), PkeyFree());
  if (!key) return Status::invalid_input(key_path.string() + ": not a PEM private key (" + openssl_errors() + ")");
  auto cert_bio = memory_bio(cert_text);
  std::shared_ptr<X509> cert(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr), X509Free());
  if (!cert) return Status::invalid_input(cert_path.string() + ": not a PEM certificate (" + openssl_errors() + ")");
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return Status::invalid_input(key_path.string() + ": the key does not match the certificate in " +
                                 cert_path.string());
  }
  Identity identity;
  identity.name = certificate_common_name(cert.get());
  if (identity.name.empty()) return Status::invalid_input(cert_path.string() + ": the certificate has no subject CN");
  identity.fingerprint = certificate_fingerprint(cert.get());
  identity.key = std::move(key);
  identity.cert = std::move(cert);
  return identity;
}

}  // namespace tessera::net
