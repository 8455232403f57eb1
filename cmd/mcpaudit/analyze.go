package main

import (
	"context"
	"errors"
	"io"
)

func analyzeCommand(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return &exitError{code: 2, err: errors.New("analyze: not built yet")}
}
