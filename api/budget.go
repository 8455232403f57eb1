package api

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// BudgetLeft says how much of an error budget is left at SLO target, given
// the share left f (ErrorBudgetRemaining): a percentage ("99.00%"), or, once
// the budget is overspent (f < 0), "none" with how many times the budget was
// spent and the error rate against the budget: "none: spent 750× (error rate
// 75% against a budget of 0.1%)". Before op46 it said "none (overspent by
// 74900.00%)", a share of a share that nobody reads at a glance. The API's
// error_budget_left, the page, the report and mcpaudit slo all print it.
func BudgetLeft(f, target float64) string {
	if f >= 0 {
		return fmt.Sprintf("%.2f%%", f*100)
	}
	if math.IsInf(f, -1) || target >= 1 {
		// A target of 100 % leaves no budget: any bad write overspends it.
		return "none (a target of 100% leaves no error budget)"
	}
	spent := 1 - f
	return fmt.Sprintf("none: spent %s (error rate %s against a budget of %s)", Times(spent), shortPercent(spent*(1-target)), shortPercent(1-target))
}

// Times prints a multiple of the error budget ("750×", "12.5×", "1.02×"):
// at most three significant digits below 1000, no trailing zeros.
func Times(x float64) string {
	prec := 2
	switch {
	case x >= 100:
		prec = 0
	case x >= 10:
		prec = 1
	}
	s := strconv.FormatFloat(x, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s + "×"
}

// shortPercent prints a fraction as a percentage of at most three
// significant digits: 0.001 is "0.1%", 0.75 "75%", 0.00001 "0.001%".
func shortPercent(f float64) string {
	return strconv.FormatFloat(f*100, 'g', 3, 64) + "%"
}
