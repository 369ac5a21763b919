package main

import (
	"fmt"
	"os"
)

func demo([]string) int {
	fmt.Fprintln(os.Stderr, "tripswitch demo: not built yet — it lands with the end-to-end issue")
	return 1
}
