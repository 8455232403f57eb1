package detect_test

import "github.com/mcpaudit/mcpaudit/collector/detect"

// pendingOf is the partition's pending count (ux14 on).
func pendingOf(ps detect.PartitionStatus) int { return ps.Pending }
