package dashboards

import (
	"fmt"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/metrics"
	"github.com/mcpaudit/mcpaudit/rules"
)

// Template variables.
const (
	VarDatasource  = "datasource"   // the Prometheus data source
	VarServer      = "server"       // MCP servers, multi-select
	VarJob         = "job"          // the Prometheus job of mcpaudit
	VarMCPAuditURL = "mcpaudit_url" // base URL of the mcpaudit API, as the browser reaches it
)

// DefaultMCPAuditURL is the default of the mcpaudit_url variable; set it to
// where `mcpaudit serve` answers (its API port, serve.api_listen, :9464 by default).
const DefaultMCPAuditURL = "http://localhost:9464"

// Common tags of every dashboard.
var tags = []string{"generated", "mcpaudit"}

// ds points every query at the datasource variable.
var ds = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + VarDatasource + "}")}

// rate is the range of per-second rates on graphs.
const rate = "$__rate_interval"

// jobMatcher restricts a selector to the mcpaudit job.
var jobMatcher = fmt.Sprintf(`job="$%s"`, VarJob)

// serverMatcher restricts a selector to the mcpaudit job and the selected
// servers.
var serverMatcher = jobMatcher + "," + fmt.Sprintf(`%s=~"$%s"`, metrics.LabelServer, VarServer)

// unverifiedKind selects the unverified_write findings.
var unverifiedKind = fmt.Sprintf(`%s="%s"`, metrics.LabelKind, audit.KindUnverifiedWrite)

// sel renders a selector: the metric with its label matchers.
func sel(metric string, matchers ...string) string {
	if len(matchers) == 0 {
		return metric
	}
	return metric + "{" + strings.Join(matchers, ",") + "}"
}

// query is a range query with a legend.
func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(ds).Expr(expr).LegendFormat(legend).Range()
}

// instant is an instant query for a single value.
func instant(expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(ds).Expr(expr).Instant()
}

// rows is an instant query whose result is shown as a table, one row a series.
func rows(expr string) *prometheus.DataqueryBuilder {
	return instant(expr).Format(prometheus.PromQueryFormatTable)
}

// targets gives the queries reference ids A, B, C...
func targets(qs []*prometheus.DataqueryBuilder) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], len(qs))
	for i, q := range qs {
		out[i] = q.RefId(string(rune('A' + i)))
	}
	return out
}

// graph is a time series panel, half the width.
func graph(title, description, unit string, qs ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().
		Title(title).Description(description).Unit(unit).Datasource(ds).
		Targets(targets(qs)).
		Span(12).Height(8).
		FillOpacity(10).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom).ShowLegend(true))
}

// single is a stat panel of one value, a quarter of the width.
func single(title, description, unit string, q *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title(title).Description(description).Unit(unit).Datasource(ds).
		Targets(targets([]*prometheus.DataqueryBuilder{q})).
		Span(6).Height(4).
		GraphMode(common.BigValueGraphModeNone).
		Orientation(common.VizOrientationAuto).
		ColorMode(common.BigValueColorModeValue).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
}

// grid is a table panel of an instant query, the full width.
func grid(title, description, unit string, q *prometheus.DataqueryBuilder) *table.PanelBuilder {
	return table.NewPanelBuilder().
		Title(title).Description(description).Unit(unit).Datasource(ds).
		Targets(targets([]*prometheus.DataqueryBuilder{q})).
		Span(24).Height(8).
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"})).
		// Drop the Time column of an instant query.
		WithTransformation(dashboard.DataTransformerConfig{
			Id:      "organize",
			Options: map[string]any{"excludeByName": map[string]any{"Time": true}},
		})
}

// quantiles returns the p50, p95 and p99 of a histogram, summed by le and the
// given labels.
func quantiles(histogram, by string, matchers ...string) []*prometheus.DataqueryBuilder {
	var out []*prometheus.DataqueryBuilder
	for _, q := range []struct{ phi, legend string }{{"0.5", "p50"}, {"0.95", "p95"}, {"0.99", "p99"}} {
		expr := fmt.Sprintf("histogram_quantile(%s, sum by (%s) (rate(%s[%s])))",
			q.phi, joinBy(by, "le"), sel(histogram+"_bucket", matchers...), rate)
		legend := q.legend
		if by != "" {
			legend = "{{" + strings.ReplaceAll(by, ", ", "}} {{") + "}} " + legend
		}
		out = append(out, query(expr, legend))
	}
	return out
}

func joinBy(labels ...string) string {
	var out []string
	for _, l := range labels {
		if l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, ", ")
}

// Standard variables.

func datasourceVar() *dashboard.DatasourceVariableBuilder {
	return dashboard.NewDatasourceVariableBuilder(VarDatasource).Label("Data source").Type("prometheus")
}

func serverVar() *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(VarServer).
		Label("Server").
		Description("MCP servers, as named in the mcpaudit configuration.").
		Datasource(ds).
		Query(dashboard.StringOrMap{String: cog.ToPtr(fmt.Sprintf("label_values(%s{%s}, %s)", metrics.ToolCallsTotal, jobMatcher, metrics.LabelServer))}).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).IncludeAll(true).AllValue(".*").
		Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("All")}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")}})
}

func textVar(name, label, description, value string) *dashboard.TextBoxVariableBuilder {
	return dashboard.NewTextBoxVariableBuilder(name).
		Label(label).Description(description).
		DefaultValue(dashboard.StringOrMap{String: cog.ToPtr(value)}).
		Current(dashboard.VariableOption{Text: dashboard.StringOrArrayOfString{String: cog.ToPtr(value)}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(value)}})
}

func jobVar() *dashboard.TextBoxVariableBuilder {
	return textVar(VarJob, "Job", "Prometheus job name of the mcpaudit scrape target.", rules.DefaultJob)
}

// DefaultRelayJob is the default of the relays dashboard's job variable:
// the job under which Prometheus scrapes the relays' --metrics-listen.
const DefaultRelayJob = "mcpaudit-relay"

func relayJobVar() *dashboard.TextBoxVariableBuilder {
	return textVar(VarJob, "Job", "Prometheus job name of the capture relays' scrape targets (mcpaudit proxy and wrap, --metrics-listen).", DefaultRelayJob)
}

func mcpauditURLVar() *dashboard.TextBoxVariableBuilder {
	return textVar(VarMCPAuditURL, "mcpaudit URL", "Base URL of the mcpaudit serve API, as your browser reaches it.", DefaultMCPAuditURL)
}

// newBoard starts a dashboard with the settings every one shares.
func newBoard(uid, title, description string, extraTags ...string) *dashboard.DashboardBuilder {
	return newBoardOf(jobVar(), uid, title, description, extraTags...).WithVariable(serverVar())
}

// newBoardOf starts a dashboard with the settings every one shares and the
// given job variable, without the server variable.
func newBoardOf(job *dashboard.TextBoxVariableBuilder, uid, title, description string, extraTags ...string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags(append(append([]string{}, tags...), extraTags...)).
		Readonly().
		Timezone("browser").
		Refresh("30s").
		Time("now-6h", "now").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("mcpaudit dashboards").
			Type(dashboard.DashboardLinkTypeDashboards).Tags([]string{"mcpaudit"}).
			AsDropdown(true).IncludeVars(true).KeepTime(true)).
		WithVariable(datasourceVar()).
		WithVariable(job)
}

// GridWidth is the width of Grafana's dashboard grid.
const GridWidth = 24

// layout places the panels of d left to right in their order, each row as
// high as its highest panel, starting a new row when a panel would pass
// the grid's width: the SDK's own placement does not wrap a wide panel.
func layout(d *dashboard.Dashboard) {
	var x, y, rowHeight uint32
	for _, p := range d.Panels {
		if p.Panel == nil || p.Panel.GridPos == nil {
			continue
		}
		g := p.Panel.GridPos
		if g.W > GridWidth {
			g.W = GridWidth
		}
		if x+g.W > GridWidth {
			x, y, rowHeight = 0, y+rowHeight, 0
		}
		g.X, g.Y = x, y
		x += g.W
		rowHeight = max(rowHeight, g.H)
	}
}
