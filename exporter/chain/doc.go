// Package chain is the tamper evidence of stored history: a hash chain per
// tenant over the calls, findings and finding state changes a store keeps,
// and checkpoints of the chains' heads signed with Ed25519.
//
// A store appends one Entry per tenant to the tenant's chain for each
// commit that stores new rows of that tenant: the entry names the rows (a
// range of call row ids, or the findings of the commit) and holds the
// digest of their contents, and its hash covers the previous entry's hash.
// Changing, deleting, inserting or reordering a stored row changes a
// digest; recomputing the digests and hashes after an edit changes the
// chain's head, which a signed checkpoint made before the edit no longer
// matches. Only someone holding the private key can sign a new head, so the
// key stays with the collector and the public key goes to whoever verifies
// (mcpaudit verify), as with CloudTrail's digest files.
//
// Retention cuts a chain: the entries whose rows are all gone are removed,
// and a Cut records where the remaining chain starts and the hash before
// it; the next checkpoint signs the cut, so that a removal is never silent.
package chain
