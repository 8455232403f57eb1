module github.com/mcpaudit/mcpaudit

go 1.26
