package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/mcpaudit/mcpaudit/api"
	"github.com/mcpaudit/mcpaudit/audit"
	"github.com/mcpaudit/mcpaudit/exporter/sqlite"
)

// findingChangeCommand implements `mcpaudit findings ack|resolve|reopen ID
// --note ...`, against a server or a data dir.
func findingChangeCommand(action string, args []string, stdout, stderr io.Writer) error {
	var note, by *string
	q, _, err := parseQueryFlags("findings "+action, args, stderr, "findings "+action+" [flags] FINDING-ID", func(fs *flag.FlagSet) {
		note = fs.String("note", "", "why: what was found or done")
		by = fs.String("by", "", "who, recorded when the server has no credentials (default $USER); with credentials the token's name is")
	})
	if err != nil {
		return quietHelp(err)
	}
	if len(q.positional) != 1 {
		return &exitError{code: 2, err: fmt.Errorf("findings %s: name one finding id", action)}
	}
	who := *by
	if who == "" {
		who = os.Getenv("USER")
	}
	body, _ := json.Marshal(api.ChangeRequest{Note: *note, By: who})
	b, err := q.post("/api/v1/findings/"+q.positional[0]+"/"+action, body)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if q.format == "json" {
		stdout.Write(b)
		return nil
	}
	var st audit.FindingStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return &exitError{code: 2, err: err}
	}
	fmt.Fprintf(stdout, "%s: %s by %s at %s\n", q.positional[0], st.State, st.By, st.At.UTC().Format("2006-01-02 15:04:05Z"))
	return nil
}

// post performs one API POST, against the server or the data dir.
func (q *queryFlags) post(path string, body []byte) ([]byte, error) {
	if q.server != "" {
		req, err := http.NewRequest("POST", strings.TrimRight(q.server, "/")+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		if q.token != "" {
			req.Header.Set("Authorization", "Bearer "+q.token)
		}
		client, err := q.client()
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("cannot reach %s: %w", q.server, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, apiError(resp, b)
		}
		return b, nil
	}
	path0 := filepath.Join(q.dataDir, storeFile)
	if err := storeExists(q.dataDir, path0); err != nil {
		return nil, err
	}
	st, err := sqlite.Open(path0, sqlite.NewDefaultOptions())
	if err != nil {
		return nil, fmt.Errorf("cannot open the data dir %s: %w", q.dataDir, err)
	}
	defer st.Close()
	rec := httptest.NewRecorder()
	api.New(st, NewDefaultConfig().Serve.SLOTarget).Handler().ServeHTTP(rec, httptest.NewRequest("POST", path, bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		var e api.Error
		if json.Unmarshal(rec.Body.Bytes(), &e) == nil && e.Error != "" {
			return nil, errors.New(e.Error)
		}
		return nil, fmt.Errorf("%s", strings.TrimSpace(rec.Body.String()))
	}
	return rec.Body.Bytes(), nil
}
