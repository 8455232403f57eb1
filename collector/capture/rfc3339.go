package capture

import "time"

// parseUTCMicro reads the common form of a record's time,
// YYYY-MM-DDTHH:MM:SS, up to nine digits of fraction and Z, and returns it
// rounded to the microsecond as time.Parse(time.RFC3339Nano, ...) followed
// by Round(time.Microsecond) would. It reports false for any other text
// (an offset, a lowercase letter, a leap second, a day the month lacks...),
// which the caller hands to time.Parse: this only skips time.Parse's
// general layout walk where the answer is certain.
func parseUTCMicro(b []byte) (time.Time, bool) {
	if len(b) < 20 || b[4] != '-' || b[7] != '-' || b[10] != 'T' || b[13] != ':' || b[16] != ':' || b[len(b)-1] != 'Z' {
		return time.Time{}, false
	}
	year, ok1 := digits(b[0:4])
	month, ok2 := digits(b[5:7])
	day, ok3 := digits(b[8:10])
	hour, ok4 := digits(b[11:13])
	minute, ok5 := digits(b[14:16])
	sec, ok6 := digits(b[17:19])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 ||
		month < 1 || month > 12 || day < 1 || day > daysIn(month, year) ||
		hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	ns := 0
	if frac := b[19 : len(b)-1]; len(frac) > 0 {
		if frac[0] != '.' || len(frac) < 2 || len(frac) > 10 {
			return time.Time{}, false
		}
		n, ok := digits(frac[1:])
		if !ok {
			return time.Time{}, false
		}
		for i := len(frac) - 1; i < 9; i++ {
			n *= 10
		}
		ns = n
	}
	// Halves round up, as Round does for times after the zero time;
	// time.Date carries a whole second into the next.
	ns = (ns + 500) / 1000 * 1000
	return time.Date(year, time.Month(month), day, hour, minute, sec, ns, time.UTC), true
}

// digits reads b as an unsigned decimal number of ASCII digits only.
func digits(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// daysIn returns how many days month has in year.
func daysIn(month, year int) int {
	switch month {
	case 2:
		if year%4 == 0 && (year%100 != 0 || year%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
