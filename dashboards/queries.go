package dashboards

import (
	"encoding/json"
	"fmt"
	"regexp"
)

// Query is the PromQL of one panel target, for checking dashboards outside
// Grafana: parsing it, or running it against a real Prometheus.
type Query struct {
	Dashboard string // uid
	Panel     string // title
	Expr      string // with Grafana variables and macros, as stored
	Instant   bool
}

// Queries lists the queries of every panel of a dashboard's JSON.
func Queries(dashboardJSON []byte) ([]Query, error) {
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr    string `json:"expr"`
				Instant bool   `json:"instant"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return nil, fmt.Errorf("cannot decode dashboard: %w", err)
	}
	var out []Query
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out = append(out, Query{Dashboard: d.UID, Panel: p.Title, Expr: t.Expr, Instant: t.Instant})
		}
	}
	return out, nil
}

var variable = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)`)

// Expand replaces the Grafana variables and macros ($server, ${server},
// $__rate_interval, $__range...) in expr by their values in vars; unknown
// ones are left as they are.
func Expand(expr string, vars map[string]string) string {
	return variable.ReplaceAllStringFunc(expr, func(m string) string {
		sub := variable.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		if v, ok := vars[name]; ok {
			return v
		}
		return m
	})
}
