package conf

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	f := func(in string, want Size, wantErr string) {
		t.Helper()
		got, err := ParseSize(in)
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Errorf("ParseSize(%q) = %d, %v; want an error with %q", in, got, err, wantErr)
			}
			return
		}
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	f("402653184", 402653184, "")
	f("0", 0, "")
	f("384MiB", 384<<20, "")
	f("1GiB", 1<<30, "")
	f("1.5GiB", 3<<29, "")
	f("400MB", 400_000_000, "")
	f("64kB", 64_000, "")
	f("64KB", 64_000, "")
	f("64KiB", 64<<10, "")
	f("2TiB", 2<<40, "")
	f("512B", 512, "")
	f(" 1 GiB ", 1<<30, "")
	f("-1", 0, "negative")
	f("-1MiB", 0, "negative")
	f("0.5B", 0, "whole number")
	f("1e30TiB", 0, "too large")
	f("384M", 0, "want a size")
	f("384mib", 0, "want a size")
	f("NaNGiB", 0, "want a size")
	f("", 0, "want a size")
	f("GiB", 0, "want a size")
}

func TestSize_String(t *testing.T) {
	f := func(in Size, want string) {
		t.Helper()
		if got := in.String(); got != want {
			t.Errorf("Size(%d).String() = %q, want %q", int64(in), got, want)
		}
		if back, err := ParseSize(want); err != nil || back != in {
			t.Errorf("ParseSize(%q) = %d, %v; want %d back", want, back, err, int64(in))
		}
	}
	f(0, "0")
	f(384<<20, "384MiB")
	f(1<<30, "1GiB")
	f(400_000_000, "400MB")
	f(1000, "1kB")
	f(1023, "1023")
}

// TestDecode_Size: a size key takes units in a file and reports a bad
// one with its line and key path; the reference lists it as a size.
func TestDecode_Size(t *testing.T) {
	type cfg struct {
		Limit Size `yaml:"memory_limit"`
	}
	var c cfg
	if _, err := Decode([]byte("memory_limit: 384MiB\n"), &c, nil); err != nil || c.Limit != 384<<20 {
		t.Fatalf("memory_limit: 384MiB = %d, %v", c.Limit, err)
	}
	_, err := Decode([]byte("\nmemory_limit: 384 megs\n"), &c, nil)
	if err == nil || !strings.Contains(err.Error(), "memory_limit") || !strings.Contains(err.Error(), "2") || !strings.Contains(err.Error(), "want a size") {
		t.Errorf("a bad size: %v; want its line, key and what is wanted", err)
	}
	keys := Keys(cfg{Limit: 1 << 30}, func(reflect.Type, string) string { return "" })
	if len(keys) != 1 || keys[0].Type != "size" || keys[0].Default != "1GiB" {
		t.Errorf("reference: %+v, want a size defaulting to 1GiB", keys)
	}
}
