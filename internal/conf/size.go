package conf

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// Size is a number of bytes. In a file it is a whole number of bytes
// ("402653184") or a number with a unit: B; kB (or KB), MB, GB, TB in
// powers of 1000; KiB, MiB, GiB, TiB in powers of 1024 ("384MiB", "1GiB",
// "400MB", "1.5GiB"). It is written back in the largest unit that keeps it
// exact.
type Size int64

var sizeType = reflect.TypeFor[Size]()

// sizeUnits are the units ParseSize reads, longest suffix first within
// each family, so that "MiB" is not read as "B".
var sizeUnits = []struct {
	name string
	mult float64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}, {"KB", 1e3},
	{"B", 1},
}

// ParseSize reads a size as Size documents it.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("want a size in bytes (402653184, 384MiB, 1GiB, 400MB), not %q", s)
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("size %q: must not be negative", s)
		}
		return Size(n), nil
	}
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(t, u.name)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			break
		}
		if f < 0 {
			return 0, fmt.Errorf("size %q: must not be negative", s)
		}
		b := f * u.mult
		if b >= math.MaxInt64 {
			return 0, fmt.Errorf("size %q: too large", s)
		}
		if b != math.Trunc(b) {
			return 0, fmt.Errorf("size %q: not a whole number of bytes", s)
		}
		return Size(b), nil
	}
	return 0, fmt.Errorf("want a size in bytes with an optional unit B, kB, MB, GB, TB, KiB, MiB, GiB or TiB (402653184, 384MiB, 1GiB, 400MB), not %q", s)
}

// String writes s in the unit that divides it exactly and is largest:
// 402653184 is "384MiB", 400000000 "400MB", 1000 "1kB", 1023 "1023".
func (s Size) String() string {
	if s == 0 {
		return "0"
	}
	best, mult := "", int64(1)
	for _, u := range sizeUnits {
		if m := int64(u.mult); m > mult && int64(s)%m == 0 {
			best, mult = u.name, m
		}
	}
	return strconv.FormatInt(int64(s)/mult, 10) + best
}

// UnmarshalText reads a size as ParseSize does.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText writes s as String does.
func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
