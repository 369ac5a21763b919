// Command checkstatic fails unless each file named is a statically linked
// ELF executable (no program interpreter, no dynamic section), which is what
// a distroless or scratch image can run.
package main

import (
	"debug/elf"
	"fmt"
	"os"
)

func main() {
	failed := false
	for _, path := range os.Args[1:] {
		if err := check(path); err != nil {
			fmt.Fprintln(os.Stderr, "checkstatic:", err)
			failed = true
			continue
		}
		fmt.Printf("%s: static ELF executable\n", path)
	}
	if failed || len(os.Args) < 2 {
		os.Exit(1)
	}
}

func check(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			return fmt.Errorf("%s is dynamically linked (%s segment)", path, p.Type)
		}
	}
	return nil
}
