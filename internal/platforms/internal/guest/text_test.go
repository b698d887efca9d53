package guest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseSemver(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Semver
		bad  bool
	}{
		{in: "1.2.1", want: Semver{1, 2, 1}},
		{in: " v0.7.8\n", want: Semver{0, 7, 8}},
		{in: "1.2", want: Semver{1, 2, 0}},
		{in: "2.0.0-beta.0", want: Semver{2, 0, 0}},
		{in: "1.1.1-12-g0a1b2c3", want: Semver{1, 1, 1}},
		{in: "1.2.1+build", want: Semver{1, 2, 1}},
		{in: "1", bad: true},
		{in: "1.2.3.4", bad: true},
		{in: "1.x.0", bad: true},
		{in: "1.-2.0", bad: true},
		{in: "", bad: true},
	} {
		v, err := ParseSemver(tc.in)
		if tc.bad != (err != nil) || (!tc.bad && v != tc.want) {
			t.Errorf("ParseSemver(%q) = %v, %v; want %v (bad: %v)", tc.in, v, err, tc.want, tc.bad)
		}
	}
	if !(Semver{0, 23, 2}).Less(Semver{1, 0, 0}) || !(Semver{1, 1, 9}).Less(Semver{1, 2, 0}) ||
		(Semver{1, 0, 0}).Less(Semver{1, 0, 0}) || (Semver{1, 0, 1}).Less(Semver{1, 0, 0}) {
		t.Error("version comparison is wrong")
	}
	assert.Equal(t, "1.2.0", (Semver{1, 2, 0}).String(), "String")
}

func TestTail(t *testing.T) {
	assert.Equal(t, "c\nd", Tail([]byte("a\nb\nc\nd\n"), 2), "Tail")
	assert.Equal(t, "x\nx\nx", Tail([]byte(strings.Repeat("x\n", 3)), 10), "Tail")
}

func TestTruncate(t *testing.T) {
	assert.Equal(t, "abc...", Truncate("abcdef", 3), "Truncate")
	assert.Equal(t, "abc", Truncate("abc", 3), "Truncate")
}
