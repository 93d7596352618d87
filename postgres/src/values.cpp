// Parameters to libpq's form and result text back to C++ values. Results
// come in PostgreSQL's text format (every type has one, and it is what
// the server's own tools show); each read checks the column's type, so a
// column read as a C++ type it does not hold is a type_error naming both,
// never a silent reinterpretation.

#include <smarm/postgres/postgres.hpp>

#include <libpq-fe.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

namespace smarm::postgres {

namespace {

// pg_type OIDs (src/include/catalog/pg_type.dat; stable across versions).
constexpr unsigned oid_bool = 16, oid_bytea = 17, oid_int8 = 20, oid_int2 = 21, oid_int4 = 23,
                   oid_oid = 26, oid_float4 = 700, oid_float8 = 701, oid_numeric = 1700;

const char* type_name(unsigned oid) {
    switch (oid) {
        case oid_bool:
            return "boolean";
        case oid_bytea:
            return "bytea";
        case oid_int8:
            return "bigint";
        case oid_int2:
            return "smallint";
        case oid_int4:
            return "integer";
        case 25:
            return "text";
        case oid_oid:
            return "oid";
        case 114:
            return "json";
        case oid_float4:
            return "real";
        case oid_float8:
            return "double precision";
        case 1042:
            return "character";
        case 1043:
            return "character varying";
        case 1082:
            return "date";
        case 1114:
            return "timestamp";
        case 1184:
            return "timestamptz";
        case oid_numeric:
            return "numeric";
        case 2950:
            return "uuid";
        case 3802:
            return "jsonb";
        default:
            return nullptr;
    }
}

[[noreturn]] void mismatch(const char* column, unsigned oid, const char* cpp) {
    const char* t = type_name(oid);
    throw type_error(std::string("postgres: column \"") + column + "\" is " +
                     (t != nullptr ? t : "type oid " + std::to_string(oid)) + ", not readable as " +
                     cpp);
}

[[noreturn]] void bad_value(const char* column, std::string_view text, const char* cpp) {
    throw type_error(std::string("postgres: column \"") + column + "\" value \"" +
                     std::string(text.substr(0, 64)) + "\" does not fit " + cpp);
}

template <class T>
void decode_integer(std::string_view text, unsigned oid, const char* column, T& out,
                    const char* cpp) {
    if (oid != oid_int2 && oid != oid_int4 && oid != oid_int8 && oid != oid_oid)
        mismatch(column, oid, cpp);
    const auto r = std::from_chars(text.data(), text.data() + text.size(), out);
    if (r.ec != std::errc() || r.ptr != text.data() + text.size()) bad_value(column, text, cpp);
}

template <class T>
void decode_float(std::string_view text, unsigned oid, const char* column, T& out,
                  const char* cpp) {
    if (oid != oid_float4 && oid != oid_float8 && oid != oid_numeric && oid != oid_int2 &&
        oid != oid_int4 && oid != oid_int8)
        mismatch(column, oid, cpp);
    // The server writes infinities as "Infinity"; from_chars reads them
    // (and "NaN") case-insensitively.
    const auto r = std::from_chars(text.data(), text.data() + text.size(), out);
    if (r.ec != std::errc() || r.ptr != text.data() + text.size()) bad_value(column, text, cpp);
}

detail::param text_param(unsigned oid, std::string v) {
    detail::param p;
    p.oid = oid;
    p.value = std::move(v);
    return p;
}

template <class T>
detail::param integer_param(unsigned oid, T v) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    return text_param(oid, std::string(buf, r.ptr));
}

template <class T>
detail::param float_param(unsigned oid, T v) {
    if (std::isnan(v)) return text_param(oid, "NaN");
    if (std::isinf(v)) return text_param(oid, v > 0 ? "Infinity" : "-Infinity");
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest round trip
    return text_param(oid, std::string(buf, r.ptr));
}

}  // namespace

namespace detail {

param encode(bool v) {
    return text_param(oid_bool, v ? "t" : "f");
}
param encode(std::int16_t v) {
    return integer_param(oid_int2, v);
}
param encode(std::int32_t v) {
    return integer_param(oid_int4, v);
}
param encode(std::int64_t v) {
    return integer_param(oid_int8, v);
}
param encode(float v) {
    return float_param(oid_float4, v);
}
param encode(double v) {
    return float_param(oid_float8, v);
}

param encode(std::string_view v) {
    // Text parameters are C strings to libpq: a NUL would cut the value
    // short without a word. PostgreSQL text cannot hold one anyway.
    if (v.find('\0') != std::string_view::npos)
        throw type_error(
            "postgres: a text parameter contains a NUL byte; send binary data as "
            "postgres::bytes");
    return text_param(0, std::string(v));
}

param encode(const bytes& v) {
    param p;
    p.oid = oid_bytea;
    p.binary = true;
    p.value.assign(reinterpret_cast<const char*>(v.data.data()), v.data.size());
    return p;
}

param encode(std::nullopt_t) {
    param p;
    p.null = true;
    return p;
}

void decode(std::string_view text, unsigned oid, const char* column, bool& out) {
    if (oid != oid_bool) mismatch(column, oid, "bool");
    if (text == "t")
        out = true;
    else if (text == "f")
        out = false;
    else
        bad_value(column, text, "bool");
}
void decode(std::string_view text, unsigned oid, const char* column, std::int16_t& out) {
    decode_integer(text, oid, column, out, "std::int16_t");
}
void decode(std::string_view text, unsigned oid, const char* column, std::int32_t& out) {
    decode_integer(text, oid, column, out, "std::int32_t");
}
void decode(std::string_view text, unsigned oid, const char* column, std::int64_t& out) {
    decode_integer(text, oid, column, out, "std::int64_t");
}
void decode(std::string_view text, unsigned oid, const char* column, float& out) {
    decode_float(text, oid, column, out, "float");
}
void decode(std::string_view text, unsigned oid, const char* column, double& out) {
    decode_float(text, oid, column, out, "double");
}
void decode(std::string_view text, unsigned, const char*, std::string& out) {
    out.assign(text);  // every type has a text form
}
void decode(std::string_view text, unsigned oid, const char* column, bytes& out) {
    if (oid != oid_bytea) mismatch(column, oid, "postgres::bytes");
    // The column's text is NUL-terminated (PQgetvalue); libpq reads both
    // bytea_output forms (hex and escape).
    std::size_t n = 0;
    unsigned char* raw = PQunescapeBytea(reinterpret_cast<const unsigned char*>(text.data()), &n);
    if (raw == nullptr) bad_value(column, text, "postgres::bytes");
    out.data.assign(reinterpret_cast<const std::byte*>(raw),
                    reinterpret_cast<const std::byte*>(raw) + n);
    PQfreemem(raw);
}

void throw_null(const char* column) {
    throw type_error(std::string("postgres: column \"") + column +
                     "\" is NULL; read it as std::optional");
}

}  // namespace detail

int result::size() const noexcept {
    return r_ ? PQntuples(r_.get()) : 0;
}
int result::columns() const noexcept {
    return r_ ? PQnfields(r_.get()) : 0;
}

std::uint64_t result::affected() const noexcept {
    if (!r_) return 0;
    const char* t = PQcmdTuples(r_.get());
    std::uint64_t n = 0;
    std::from_chars(t, t + std::strlen(t), n);
    return n;
}

row result::operator[](int i) const {
    if (i < 0 || i >= size())
        throw std::out_of_range("smarm::postgres::result: row " + std::to_string(i) + " of " +
                                std::to_string(size()));
    return row(r_.get(), i);
}

int row::size() const noexcept {
    return PQnfields(r_);
}
bool row::is_null(int column) const {
    check(column);
    return PQgetisnull(r_, i_, column) != 0;
}
const char* row::name(int column) const {
    check(column);
    return PQfname(r_, column);
}
std::string_view row::text(int column) const {
    return {PQgetvalue(r_, i_, column), static_cast<std::size_t>(PQgetlength(r_, i_, column))};
}
unsigned row::type(int column) const {
    return PQftype(r_, column);
}

int row::index(std::string_view column) const {
    const std::string name(column);
    for (int c = 0; c < size(); ++c)
        if (name == PQfname(r_, c)) return c;
    throw type_error("postgres: the result has no column \"" + name + "\"");
}

void row::check(int column) const {
    if (column < 0 || column >= size())
        throw type_error("postgres: column " + std::to_string(column) + " of a row of " +
                         std::to_string(size()));
}

void row::throw_arity(std::size_t wanted) const {
    throw type_error("postgres: a row of " + std::to_string(size()) + " columns read as " +
                     std::to_string(wanted) + " values");
}

}  // namespace smarm::postgres
