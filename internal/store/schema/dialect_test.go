package schema

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestToPostgres(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`SELECT pack, off, len FROM chunks WHERE id = ?`, `SELECT pack, off, len FROM chunks WHERE id = $1`},
		{`INSERT OR IGNORE INTO chunks(id, pack) VALUES (?, ?), (?, ?)`, `INSERT INTO chunks(id, pack) VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING`},
		{`DELETE FROM workspaces WHERE id = ?`, `DELETE FROM workspaces WHERE id = $1`},
		{`SELECT count(*) FROM projects`, `SELECT count(*) FROM projects`},
	} {
		assert.Equal(t, c.want, toPostgres(c.in), "toPostgres(%q)", c.in)
	}
	var d Dialect
	q := `SELECT 1 WHERE x = ?`
	assert.Equal(t, q, d.SQL(q), "SQLite's dialect")
}
