// Package schema is the SQL of the Store's index: the migrations of each
// engine (SQLite for the embedded Store, PostgreSQL for a shared one) and
// the Dialect in which package store's statements, written once in
// SQLite's spelling, are run on PostgreSQL.
//
// Its contract:
//
//   - Migrations are append only. Migration i takes a schema from version
//     i to i+1; a released migration never changes, so a Store written by
//     older code upgrades in order, and the version (a row of the meta
//     table, meta('schema_version')) is the number of migrations applied.
//     Each engine's migrations are versioned on their own.
//   - Both engines hold the same tables under the same names and columns,
//     so one statement serves both after Dialect.SQL; what only a shared
//     Store has (pack object keys, every host's workspace records, row
//     ages, leases, nodes) is in PostgreSQL's migrations alone.
//
// The package runs nothing: package store applies the migrations and is
// the only package that runs SQL. It imports nothing of LayerFS.
package schema
