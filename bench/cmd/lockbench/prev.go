package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// prevResults is section 1 of a previous RESULTS.md (-prev): medians and
// ratios to that run's raw baseline, and Redis CPU per cycle.
type prevResults struct {
	date, runTime string
	rate          map[tpKey]float64
	ratio         map[tpKey]float64
	redisCPU      map[tpKey]float64
}

var (
	prevRateCell = regexp.MustCompile(`^([0-9.]+)([kM]?) \(([0-9.]+)×\)`)
	prevCPUCell  = regexp.MustCompile(`^([0-9.]+) / ([0-9.]+)$`)
	prevConc     = regexp.MustCompile(`^(\d+) goroutines?$`)
)

// readPrev parses the two section-1 tables of a report this program wrote.
func readPrev(path string) (*prevResults, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := &prevResults{rate: map[tpKey]float64{}, ratio: map[tpKey]float64{}, redisCPU: map[tpKey]float64{}}
	var tables [][][]string // section 1's tables, rows of cells, header first
	in1 := false
	var cur [][]string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "| date | "); ok {
			p.date = strings.TrimSuffix(v, " |")
		}
		if v, ok := strings.CutPrefix(line, "| run time | "); ok {
			p.runTime = strings.TrimSuffix(v, " |")
		}
		if strings.HasPrefix(line, "## ") {
			in1 = strings.HasPrefix(line, "## 1. ")
		}
		if !in1 {
			continue
		}
		if strings.HasPrefix(line, "|") {
			if strings.HasPrefix(line, "|---") {
				continue
			}
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(cells[i]), "†"))
			}
			cur = append(cur, cells)
		} else if cur != nil {
			tables = append(tables, cur)
			cur = nil
		}
	}
	if cur != nil {
		tables = append(tables, cur)
	}
	if len(tables) < 2 {
		return nil, fmt.Errorf("%s: no section-1 tables found", path)
	}
	concs := func(header []string) ([]int, error) {
		var out []int
		for _, h := range header[1:] {
			m := prevConc.FindStringSubmatch(h)
			if m == nil {
				return nil, fmt.Errorf("%s: unexpected column %q", path, h)
			}
			n, _ := strconv.Atoi(m[1])
			out = append(out, n)
		}
		return out, nil
	}
	cs, err := concs(tables[0][0])
	if err != nil {
		return nil, err
	}
	for _, row := range tables[0][1:] {
		for i, c := range cs {
			if i+1 >= len(row) {
				break
			}
			m := prevRateCell.FindStringSubmatch(row[i+1])
			if m == nil {
				continue
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			switch m[2] {
			case "k":
				v *= 1e3
			case "M":
				v *= 1e6
			}
			q, _ := strconv.ParseFloat(m[3], 64)
			p.rate[tpKey{row[0], c}], p.ratio[tpKey{row[0], c}] = v, q
		}
	}
	if cs, err = concs(tables[1][0]); err != nil {
		return nil, err
	}
	for _, row := range tables[1][1:] {
		for i, c := range cs {
			if i+1 >= len(row) {
				break
			}
			if m := prevCPUCell.FindStringSubmatch(row[i+1]); m != nil {
				v, _ := strconv.ParseFloat(m[1], 64)
				p.redisCPU[tpKey{row[0], c}] = v
			}
		}
	}
	if len(p.rate) == 0 {
		return nil, errors.New(path + ": section 1 has no parsable cells")
	}
	return p, nil
}

// sectionPrev compares this run's section 1 with -prev's.
func (r *report) sectionPrev(w func(string, ...any)) {
	o, p := r.opts, r.prev
	label := o.prevLabel
	if label == "" {
		label = "`" + o.prev + "`"
	}
	w("### Section 1 against a previous run: %s (%s, run time %s)\n\n", label, p.date, p.runTime)
	w("Two runs on a shared machine, not one: the rows whose code did not change show how much the load moved between them, and the ratio to each run's own raw baseline and the Redis CPU per cycle are less sensitive to it than cycles/s. Cells: previous → this run.\n\n")
	w("| implementation |")
	for _, c := range o.concs {
		w(" %d goroutine%s: cycles/s (× raw) |", c, plural(c))
	}
	w("\n|---|")
	for range o.concs {
		w("---:|")
	}
	w("\n")
	for _, k := range kinds() {
		w("| %s |", k.name)
		for _, c := range o.concs {
			key := tpKey{k.name, c}
			now, raw := r.tpMedian(k.name, c), r.tpMedian("raw rueidis", c)
			q := 0.0
			if raw > 0 {
				q = now / raw
			}
			before, ok := p.rate[key]
			if !ok {
				w(" – → %s (%.2f×) |", num(now), q)
				continue
			}
			w(" %s → %s (%.2f× → %.2f×) |", num(before), num(now), p.ratio[key], q)
		}
		w("\n")
	}
	w("\nRedis CPU per cycle, median µs, previous → this run:\n\n| implementation |")
	concColumns(w, o.concs)
	for _, k := range kinds() {
		w("| %s |", k.name)
		for _, c := range o.concs {
			t := r.throughput[tpKey{k.name, c}]
			if t == nil {
				w(" – |")
				continue
			}
			now := median(t.serverCPU)
			if before, ok := p.redisCPU[tpKey{k.name, c}]; ok {
				w(" %.1f → %.1f |", before, now)
			} else {
				w(" – → %.1f |", now)
			}
		}
		w("\n")
	}
	w("\n")
}
