package store

import "testing"

func TestToPostgres(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`SELECT pack, off, len FROM chunks WHERE id = ?`, `SELECT pack, off, len FROM chunks WHERE id = $1`},
		{`INSERT OR IGNORE INTO chunks(id, pack) VALUES (?, ?), (?, ?)`, `INSERT INTO chunks(id, pack) VALUES ($1, $2), ($3, $4) ON CONFLICT DO NOTHING`},
		{`DELETE FROM workspaces WHERE id = ?`, `DELETE FROM workspaces WHERE id = $1`},
		{`SELECT count(*) FROM projects`, `SELECT count(*) FROM projects`},
	} {
		if got := toPostgres(c.in); got != c.want {
			t.Errorf("toPostgres(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	var d dialect
	if q := `SELECT 1 WHERE x = ?`; d.sql(q) != q {
		t.Errorf("SQLite's dialect changed %q", q)
	}
}
