package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// The table's place in its Markdown file.
const (
	tableBegin = "<!-- compat: the table below is written by `make test-versions` (hack/compat) from its own results; do not edit it -->"
	tableEnd   = "<!-- /compat -->"
)

// notServedNote explains the "not served" cells.
const notServedNote = "*not served*: that release has no MutatingAdmissionPolicy at `admissionregistration.k8s.io/v1`. " +
	"A breaker whose `whileOpen.fallbackPolicy` names one says so (`FloorArmed` False, reason `FloorWriteFailed`, " +
	"and a Warning event, naming the release that serves it) and does not fail its webhook open without that floor; " +
	"every other breaker works as on any release (`TestFallbackKindNotServedIsSaid`). Use a ValidatingAdmissionPolicy there."

// renderTable is the table of results, one column per release.
func renderTable(all []result) string {
	var b strings.Builder
	b.WriteString(tableBegin + "\n\n| |")
	for _, r := range all {
		fmt.Fprintf(&b, " %s |", r.ServerVersion)
	}
	b.WriteString("\n| --- |" + strings.Repeat(" --- |", len(all)) + "\n")
	for i, c := range checks {
		fmt.Fprintf(&b, "| %s |", c.Name)
		for _, r := range all {
			status := "not run"
			if i < len(r.Checks) && r.Checks[i].Name == c.Name {
				status = r.Checks[i].Status
			}
			if status == statusNotServed {
				status = "*not served*"
			}
			fmt.Fprintf(&b, " %s |", status)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n" + notServedNote + "\n\n" + tableEnd)
	return b.String()
}

// writeTable replaces the table in the Markdown file at path.
func writeTable(path string, all []result) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	before, after, err := split(string(data))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(before+renderTable(all)+after), 0o644)
}

// split returns what comes before the table's begin marker and after its
// end marker.
func split(doc string) (before, after string, err error) {
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		return "", "", errors.New("no compatibility table: want the lines " + tableBegin + " and " + tableEnd)
	}
	return doc[:i], doc[j+len(tableEnd):], nil
}

// readTable parses the table in doc: each row's cells by column header.
func readTable(doc string) (map[string]map[string]string, error) {
	i, j := strings.Index(doc, tableBegin), strings.Index(doc, tableEnd)
	if i < 0 || j < i {
		return nil, errors.New("no compatibility table")
	}
	var header []string
	rows := map[string]map[string]string{}
	for _, line := range strings.Split(doc[i:j], "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for k := range cells {
			cells[k] = strings.TrimSpace(cells[k])
		}
		switch {
		case header == nil:
			header = cells
		case strings.HasPrefix(cells[0], "---"):
		default:
			row := map[string]string{}
			for k := 1; k < len(cells) && k < len(header); k++ {
				row[header[k]] = strings.Trim(cells[k], "*")
			}
			rows[cells[0]] = row
		}
	}
	return rows, nil
}

// checkAgainst fails when a release run here disagrees with the table in
// the Markdown file at path: the table would no longer be true.
func checkAgainst(path string, ran []result) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rows, err := readTable(string(data))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var wrong []string
	for _, r := range ran {
		for _, c := range r.Checks {
			if got := rows[c.Name][r.ServerVersion]; got != c.Status {
				wrong = append(wrong, fmt.Sprintf("%s on %s: the table says %q, this run %q", c.Name, r.ServerVersion, got, c.Status))
			}
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%s's compatibility table is not what this run found (run make test-versions to write it):\n  %s", path, strings.Join(wrong, "\n  "))
	}
	return nil
}
