package main

import (
	"errors"
	"strings"
)

// spliceSection returns the report old with section sec ("11" or "12")
// taken from md (a report of a run with -sections sec): its "## <sec>."
// block, its Targets rows (those starting "| section <sec>:") and header,
// the row starting "| section <sec> ". Everything else of old is kept as
// it was, so that a section that takes minutes can be measured again on a
// quiet machine without running the others.
func spliceSection(old, md, sec, headerRow string) (string, error) {
	newLines := strings.Split(md, "\n")
	heading := "## " + sec + ". "
	targetRow := "| section " + sec + ":"
	headerPrefix := "| section " + sec + " "
	block := sectionBlock(newLines, heading)
	if block == nil {
		return "", errors.New("this run has no section " + sec)
	}
	var rows []string
	for _, l := range newLines {
		if strings.HasPrefix(l, targetRow) {
			rows = append(rows, l)
		}
	}
	lines := strings.Split(old, "\n")
	if s, _ := blockRange(lines, "## Targets"); s < 0 {
		return "", errors.New("the report to splice into has no Targets table")
	}

	// Header: replace the section's row, or add one at the end of the
	// first table.
	var out []string
	inHeader, headerDone := false, false
	for _, l := range lines {
		switch {
		case headerDone:
		case strings.HasPrefix(l, headerPrefix):
			continue
		case strings.HasPrefix(l, "|"):
			inHeader = true
		case inHeader:
			out = append(out, headerRow)
			headerDone = true
		}
		out = append(out, l)
	}
	lines = out

	// Targets: drop the section's old rows, add the new ones at the end
	// of the table.
	out = nil
	inTargets, inTable, added := false, false, false
	for _, l := range lines {
		if strings.HasPrefix(l, "## Targets") {
			inTargets = true
		} else if strings.HasPrefix(l, "## ") {
			inTargets = false
		}
		if strings.HasPrefix(l, targetRow) {
			continue
		}
		if inTargets && strings.HasPrefix(l, "|") {
			inTable = true
		} else if inTargets && inTable && !added {
			out = append(out, rows...)
			added = true
		}
		out = append(out, l)
	}
	lines = out

	// The section: replace it, or put it where a full run writes it
	// (after sections 10, 11 and 12, before section 6, the setups and the
	// implementations).
	if start, end := blockRange(lines, heading); start >= 0 {
		return strings.Join(append(append(lines[:start:start], block...), lines[end:]...), "\n"), nil
	}
	at := len(lines)
	after := []string{"## 6. ", "## 7. ", "## Implementations"}
	if sec == "11" {
		after = append([]string{"## 12. "}, after...)
	}
	for _, h := range after {
		if s, _ := blockRange(lines, h); s >= 0 {
			at = s
			break
		}
	}
	return strings.Join(append(append(lines[:at:at], block...), lines[at:]...), "\n"), nil
}

// blockRange is the lines of the "## " block whose heading starts with
// prefix: [start, end), start -1 when there is none.
func blockRange(lines []string, prefix string) (int, int) {
	for i, l := range lines {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(lines[j], "## ") {
				return i, j
			}
		}
		return i, len(lines)
	}
	return -1, -1
}

func sectionBlock(lines []string, prefix string) []string {
	s, e := blockRange(lines, prefix)
	if s < 0 {
		return nil
	}
	return lines[s:e]
}
