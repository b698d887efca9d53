package verifier_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"layerfs.dev/layerfs/internal/cells"
	"layerfs.dev/layerfs/internal/verifier"
)

// A C01 end state with f17 missing and f3 holding the wrong number.
func ExampleVerify() {
	dir, err := os.MkdirTemp("", "c01")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			panic(err)
		}
	}
	for i := 1; i <= 1000; i++ {
		if i != 17 {
			write("f"+strconv.Itoa(i), strconv.Itoa(i)+"\n")
		}
	}
	write("f3", "4\n")

	c01, _ := cells.ByID("C01")
	// C01 has no in-sandbox checks, so no Runner is needed.
	err = verifier.Verify(context.Background(), os.DirFS(dir), c01, nil)
	fmt.Println(err)
	// Output:
	// f17: missing
	// f3: content "4\n", want "3\n"
}
