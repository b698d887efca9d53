package api_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenAPICoversRoutes keeps docs/openapi.yaml in step with the routes:
// every registered METHOD PATH is documented.
func TestOpenAPICoversRoutes(t *testing.T) {
	src, err := os.ReadFile("routes.go")
	require.NoError(t, err)
	doc, err := os.ReadFile("../../docs/openapi.yaml")
	require.NoError(t, err)
	// Split the document into path items: "  /v1/...:" and what follows.
	items := map[string]string{}
	var cur string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "  /") && strings.HasSuffix(line, ":") {
			cur = strings.TrimSuffix(strings.TrimSpace(line), ":")
			continue
		}
		if cur != "" && strings.HasPrefix(line, "    ") {
			items[cur] += line + "\n"
		} else if !strings.HasPrefix(line, " ") {
			cur = ""
		}
	}
	routes := regexp.MustCompile(`(?:s\.handle|s\.mux\.HandleFunc)\("(GET|POST|PUT|DELETE) (\S+)"`).FindAllStringSubmatch(string(src), -1)
	if len(routes) < 30 {
		t.Fatalf("found only %d routes in routes.go", len(routes))
	}
	for _, r := range routes {
		method, path := strings.ToLower(r[1]), strings.ReplaceAll(r[2], "...}", "}")
		item, ok := items[path]
		if !ok {
			t.Errorf("docs/openapi.yaml lacks the path %s", path)
			continue
		}
		if !strings.Contains(item, "\n    "+method+":") && !strings.HasPrefix(item, "    "+method+":") {
			t.Errorf("docs/openapi.yaml lacks %s %s", r[1], path)
		}
	}
}
