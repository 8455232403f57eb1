// Package access decides who a request speaks for, on every listener of
// mcpaudit serve: the ingest receivers (HTTP and gRPC), the query API, the
// page and /metrics share one Authenticator.
//
// A caller is known by a bearer token or by a verified client certificate
// (mTLS). Tokens come from the configuration (the receiver's tenant tokens
// and the named query credentials) and from a tokens file that holds only
// their SHA-256 hashes and is read again on SIGHUP. Each credential names
// one tenant (or "*", every tenant, for reading) and the scopes it may use:
// ingest, query, metrics, debug. The tenant of a request always comes from its
// credential: a tenant named in a query parameter or a header that differs
// from it is refused (Conflict), and one in a payload is never read.
//
// The package also builds the TLS configuration of the listeners
// (TLSConfig), whose certificate is read again on SIGHUP too.
package access
