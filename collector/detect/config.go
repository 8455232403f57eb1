package detect

import (
	"errors"
	"time"
)

// Config sets the detector's windows. All durations are event time.
type Config struct {
	// VerifyWindow is how long an uncertain or unconfirmed write may stay
	// pending before it is unverified. Default 5m.
	VerifyWindow time.Duration `yaml:"verify_window"`
	// CorrelationWindow is how far apart two calls may be and still be
	// compared (double applies, duplicate creates, retries). Default 1h.
	CorrelationWindow time.Duration `yaml:"correlation_window"`
	// Lateness is how far out of order calls may arrive and still be placed
	// in order. Default 30s.
	Lateness time.Duration `yaml:"lateness"`
}

// NewDefaultConfig returns the documented defaults.
func NewDefaultConfig() Config {
	return Config{VerifyWindow: 5 * time.Minute, CorrelationWindow: time.Hour, Lateness: 30 * time.Second}
}

// Validate checks that every window is usable.
func (c *Config) Validate() error {
	var errs []error
	if c.VerifyWindow <= 0 {
		errs = append(errs, errors.New("verify_window: must be positive"))
	}
	if c.CorrelationWindow <= 0 {
		errs = append(errs, errors.New("correlation_window: must be positive"))
	}
	if c.Lateness < 0 {
		errs = append(errs, errors.New("lateness: must not be negative"))
	}
	return errors.Join(errs...)
}
