package sqlite

// KeepChainRecords makes retention keep every record of a block and every
// blocks and logcut entry, as the releases before chainret52 did, until
// the function it returns is called (keepChainRecords).
func KeepChainRecords() (restore func()) {
	keepChainRecords = true
	return func() { keepChainRecords = false }
}
