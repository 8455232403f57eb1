package audit

import "unsafe"

// unsafeString returns a string that is a view of b, as a decoder's are.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
