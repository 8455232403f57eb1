package detect_test

func init() {
	if s := benchSizeFromEnv(); s > 0 {
		benchSessions = s
	}
}
