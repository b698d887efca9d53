package cells_test

import (
	"fmt"

	"layerfs.dev/layerfs/internal/cells"
)

func ExampleTwelve() {
	for _, c := range cells.Twelve()[8:10] {
		fmt.Printf("%s %s (base %q): %s\n", c.ID, c.Title, c.Base.Name, c.Body)
	}
	fmt.Println(cells.BigHash)
	// Output:
	// C09 read a 64 MiB base file (base "big"): cat big > /dev/null
	// C10 copy a 64 MiB base file (base "big"): cp big big2
	// 0a37c5c1629499526773a93d92f86117e911c137547437e685e77d0cab20354e
}
