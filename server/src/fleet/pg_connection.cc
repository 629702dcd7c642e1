#include "server/src/fleet/pg_connection.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>

namespace castscope::collector::fleet {

namespace {

// libpq's messages end with a newline and may span lines, the later ones
// indented with a tab: one line for ours, each run of whitespace one space.
std::string one_line(const char* message) {
  std::string out;
  for (const char* c = message == nullptr ? "" : message; *c != '\0'; ++c) {
    const bool space = *c == '\n' || *c == '\t' || *c == '\r' || *c == ' ';
    if (!space) out += *c;
    else if (!out.empty() && out.back() != ' ') out += ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

bool refused_credentials(std::string_view message) {
  // Not every "SSL" message: a server killed mid-connection reads "SSL SYSCALL error", and is away, not refusing.
  for (std::string_view needle : {"password authentication failed", "certificate", "no password supplied",
                                  "pg_hba.conf", "authentication"})
    if (message.find(needle) != std::string_view::npos) return true;
  return false;
}

}  // namespace

Status check_url(const std::string& url, std::string& where, std::string_view password_flag) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  if (options == nullptr) {
    Status s = Status::invalid_argument("fleet URL " + std::string(url.rfind("postgres", 0) == 0 ? "" : "'" + url + "' ") +
                                        "is not a libpq connection string: " + one_line(error));
    PQfreemem(error);
    return s;
  }
  std::string host, port, dbname, user;
  bool has_password = false;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr) continue;
    const std::string_view key = o->keyword;
    if (key == "password" && *o->val != '\0') has_password = true;
    if (key == "host" || key == "hostaddr") host = host.empty() ? o->val : host;
    if (key == "port") port = o->val;
    if (key == "dbname") dbname = o->val;
    if (key == "user") user = o->val;
  }
  PQconninfoFree(options);
  if (has_password)
    return Status::invalid_argument(
        "the fleet URL carries a password: remove it, and give it with " + std::string(password_flag) +
        " FILE, PGPASSWORD or ~/.pgpass (a password on a command line is visible to every user of the machine)");
  where = (user.empty() ? "" : user + "@") + (host.empty() ? "localhost" : host) + (port.empty() ? "" : ":" + port) +
          "/" + dbname;
  return {};
}

Status read_password_file(const std::string& path, std::string& password) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0)
    return Status::invalid_argument("password file " + path + ": cannot read it: " + std::strerror(errno));
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    return Status::invalid_argument("password file " + path +
                                    " is readable by other users: chmod 600 it (as ~/.pgpass must be)");
  std::ifstream in(path);
  if (!in) return Status::invalid_argument("password file " + path + ": cannot read it: " + std::strerror(errno));
  std::getline(in, password);
  if (!password.empty() && password.back() == '\r') password.pop_back();
  if (password.empty()) return Status::invalid_argument("password file " + path + " is empty");
  return {};
}

int64_t PgResult::integer(int row, int column) const {
  const std::string_view t = text(row, column);
  int64_t value = 0;
  std::from_chars(t.data(), t.data() + t.size(), value);
  return value;
}

Status PgConnection::connect(const PgTarget& target) {
  close();
  if (Status s = check_url(target.url, where_); !s.ok()) return s;
  std::string password;
  if (!target.password_file.empty())
    if (Status s = read_password_file(target.password_file, password); !s.ok()) return s;
  const std::string timeout = std::to_string(target.connect_timeout_s);
  // libpq takes the last value of a repeated key: our defaults come before
  // the URL (dbname, expanded), so the URL's connect_timeout and
  // application_name win; the password file's password comes after it.
  std::vector<const char*> keys = {"connect_timeout", "application_name", "dbname"};
  std::vector<const char*> values = {timeout.c_str(), target.application_name.c_str(), target.url.c_str()};
  if (!password.empty()) {
    keys.push_back("password");
    values.push_back(password.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  conn_ = PQconnectdbParams(keys.data(), values.data(), /*expand_dbname=*/1);
  if (conn_ == nullptr) return Status::internal("PostgreSQL " + where_ + ": out of memory");
  if (PQstatus(conn_) != CONNECTION_OK) {
    const std::string message = one_line(PQerrorMessage(conn_));
    close();
    const std::string what = "PostgreSQL " + where_ + ": cannot connect: " + message;
    return refused_credentials(message) ? Status(StatusCode::kUnauthenticated, what) : Status::unavailable(what);
  }
  return exec("SET client_min_messages = warning");
}

void PgConnection::close() {
  if (conn_ != nullptr) PQfinish(conn_);
  conn_ = nullptr;
}

Status PgConnection::error(std::string_view what, const PGresult* result) const {
  std::string message = one_line(result != nullptr ? PQresultErrorMessage(result) : nullptr);
  if (message.empty()) message = one_line(conn_ != nullptr ? PQerrorMessage(conn_) : "not connected");
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const std::string text = "PostgreSQL " + where_ + ": " + std::string(what) + ": " + message;
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) return Status::unavailable(text);
  // 42501 insufficient_privilege; 28xxx invalid authorization.
  if (state != nullptr && (std::string_view(state) == "42501" || std::string_view(state).substr(0, 2) == "28"))
    return Status(StatusCode::kUnauthenticated, text);
  return Status::internal(text);
}

Status PgConnection::exec(std::string_view sql) {
  PgResult ignored;
  return query(sql, {}, ignored);
}

Status PgConnection::query(std::string_view sql, std::span<const std::string> params, PgResult& out) {
  if (conn_ == nullptr) return Status::unavailable("PostgreSQL " + where_ + ": not connected");
  std::vector<const char*> values;
  values.reserve(params.size());
  for (const std::string& p : params) values.push_back(p.c_str());
  const std::string text(sql);
  PGresult* result = params.empty() ? PQexec(conn_, text.c_str())
                                    : PQexecParams(conn_, text.c_str(), static_cast<int>(values.size()), nullptr,
                                                   values.data(), nullptr, nullptr, 0);
  out = PgResult(result);
  const ExecStatusType status = PQresultStatus(result);
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return {};
  return error("query failed", result);
}

Status PgConnection::copy_in(std::string_view copy_sql, std::string_view data) {
  if (conn_ == nullptr) return Status::unavailable("PostgreSQL " + where_ + ": not connected");
  PgResult started(PQexec(conn_, std::string(copy_sql).c_str()));
  if (PQresultStatus(started.raw()) != PGRES_COPY_IN) return error("COPY failed", started.raw());
  constexpr size_t kChunk = size_t{1} << 20;
  bool sent = true;
  for (size_t at = 0; at < data.size() && sent; at += kChunk) {
    const size_t n = std::min(kChunk, data.size() - at);
    sent = PQputCopyData(conn_, data.data() + at, static_cast<int>(n)) == 1;
  }
  if (PQputCopyEnd(conn_, sent ? nullptr : "castscope: sending failed") != 1) return error("COPY failed");
  Status status;
  // The COPY's result, then the end of results.
  while (PGresult* raw = PQgetResult(conn_)) {
    PgResult result(raw);
    if (status.ok() && PQresultStatus(raw) != PGRES_COMMAND_OK) status = error("COPY failed", raw);
  }
  return status;
}

Status PgConnection::encrypt_password(const std::string& user, const std::string& password, std::string& verifier) {
  char* encrypted = PQencryptPasswordConn(conn_, password.c_str(), user.c_str(), "scram-sha-256");
  if (encrypted == nullptr) return error("cannot compute the password verifier");
  verifier = encrypted;
  PQfreemem(encrypted);
  return {};
}

}  // namespace castscope::collector::fleet
