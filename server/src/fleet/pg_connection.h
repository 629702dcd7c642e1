// One connection to the fleet's PostgreSQL (libpq), for the shipper, the
// `fleet` commands and the fleet viewer. Not thread-safe: one per thread.
//
// Passwords never travel on a command line: a URL that carries one is
// refused; the password comes from a file (its first line), the environment
// (PGPASSWORD) or ~/.pgpass, the last two read by libpq itself. Messages name
// the server as host:port/database, never with a password.
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/src/status.h"

namespace castscope::collector::fleet {

// Where and how to connect. `url`: a libpq URI or key=value string
// (sslmode=verify-full, sslrootcert=... pass through to libpq).
struct PgTarget {
  std::string url;
  std::string password_file;  // empty: PGPASSWORD or ~/.pgpass (libpq)
  int connect_timeout_s = 10;
  std::string application_name = "castscope";
};

// Refuses a URL with a password in it or that libpq cannot parse; `where`
// is host:port/database for messages. `password_flag`: the option that takes
// a password file where the URL is given (serve's is --ship-password-file).
Status check_url(const std::string& url, std::string& where, std::string_view password_flag = "--password-file");
// The password of `password_file`: its first line (a trailing newline dropped);
// the file must not be readable by others.
Status read_password_file(const std::string& path, std::string& password);

class PgResult {
 public:
  PgResult() = default;
  explicit PgResult(PGresult* result) : result_(result, &PQclear) {}
  int rows() const { return result_ ? PQntuples(result_.get()) : 0; }
  int columns() const { return result_ ? PQnfields(result_.get()) : 0; }
  bool is_null(int row, int column) const { return PQgetisnull(result_.get(), row, column) != 0; }
  std::string_view text(int row, int column) const {
    return {PQgetvalue(result_.get(), row, column), static_cast<size_t>(PQgetlength(result_.get(), row, column))};
  }
  int64_t integer(int row, int column) const;
  std::string_view column_name(int column) const { return PQfname(result_.get(), column); }
  PGresult* raw() const { return result_.get(); }

 private:
  std::shared_ptr<PGresult> result_;
};

class PgConnection {
 public:
  PgConnection() = default;
  ~PgConnection() { close(); }
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  // UNAVAILABLE when the server cannot be reached; UNAUTHENTICATED when it
  // refuses the password or certificate; INVALID_ARGUMENT for a bad URL.
  Status connect(const PgTarget& target);
  void close();
  bool connected() const { return conn_ != nullptr && PQstatus(conn_) == CONNECTION_OK; }
  PGconn* handle() const { return conn_; }
  const std::string& where() const { return where_; }

  // Statements without parameters, results ignored (several may be given).
  Status exec(std::string_view sql);
  // One statement with text parameters ($1, $2...).
  Status query(std::string_view sql, std::span<const std::string> params, PgResult& out);
  Status query(std::string_view sql, PgResult& out) { return query(sql, {}, out); }
  // COPY ... FROM STDIN (FORMAT binary) with `data` (pg_copy.h builds it).
  Status copy_in(std::string_view copy_sql, std::string_view data);
  // The role's password verifier for `user`, computed here (scram-sha-256),
  // so that the password itself never reaches the server's logs.
  Status encrypt_password(const std::string& user, const std::string& password, std::string& verifier);

 private:
  Status error(std::string_view what, const PGresult* result = nullptr) const;

  PGconn* conn_ = nullptr;
  std::string where_;
};

}  // namespace castscope::collector::fleet
