package conf

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// Share is a value that is a share of a whole, as a config file writes
// it: a fraction such as 0.05, or a percentage such as 5%. Only keys
// that are shares take a percentage: "5%" of a rate or a count means
// nothing.
type Share float64

var shareType = reflect.TypeFor[Share]()

// ParseShare reads a fraction or a percentage ("5%" is 0.05). The range a
// key allows is its own check.
func ParseShare(s string) (Share, error) {
	num, percent := strings.CutSuffix(strings.TrimSpace(s), "%")
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("want a fraction such as 0.05 or a percentage such as 5%%, not %q", s)
	}
	if percent {
		f /= 100
	}
	return Share(f), nil
}

// UnmarshalText reads a share as ParseShare does.
func (s *Share) UnmarshalText(b []byte) error {
	v, err := ParseShare(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText writes s as a fraction, in its shortest form.
func (s Share) MarshalText() ([]byte, error) {
	return strconv.AppendFloat(nil, float64(s), 'g', -1, 64), nil
}
