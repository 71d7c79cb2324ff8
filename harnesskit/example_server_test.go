package harnesskit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gyrehq/gyre/harnesskit"
)

// A harness around a Go function, in a few lines. A real one serves srv
// with http.ListenAndServe(addr, srv); this example drives it in-process.
func Example() {
	shout := harnesskit.AgentFunc(func(ctx context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		return harnesskit.Result{Answer: strings.ToUpper(run.Question())}, nil
	})
	srv, err := harnesskit.New(shout, harnesskit.Options{Agent: "shout", Model: "no-model"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	hs := httptest.NewServer(srv)
	defer hs.Close()
	resp, err := http.Post(hs.URL+"/runs", "application/json", strings.NewReader(`{"input":{"question":"hello"}}`))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var created harnesskit.RunCreated
	if err := json.NewDecoder(resp.Body).Decode(&created); err != nil {
		log.Fatal(err)
	}
	st, err := srv.Wait(context.Background(), created.RunID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode, st.Status, *st.Answer, st.Model)
	// Output: 201 completed HELLO no-model
}

// An agent records its trajectory as it goes: the user's message, each
// model turn with its tool calls, and each tool's result.
func ExampleRun_AddAgentStep() {
	agent := harnesskit.AgentFunc(func(ctx context.Context, run *harnesskit.Run) (harnesskit.Result, error) {
		if err := run.AddUserMessage(run.Question()); err != nil {
			return harnesskit.Result{}, err
		}
		if _, err := run.AddAgentStep(harnesskit.AgentStep{
			ToolCalls: []harnesskit.ToolCall{{ID: "c1", Name: "add", Arguments: json.RawMessage(`{"a":2,"b":2}`)}},
			Metrics:   &harnesskit.Metrics{PromptTokens: 31, CompletionTokens: 9},
		}); err != nil {
			return harnesskit.Result{}, err
		}
		if err := run.AddToolResult("c1", "4"); err != nil {
			return harnesskit.Result{}, err
		}
		if _, err := run.AddAgentStep(harnesskit.AgentStep{Message: "2 + 2 = 4"}); err != nil {
			return harnesskit.Result{}, err
		}
		return harnesskit.Result{Answer: "4"}, nil
	})
	srv, err := harnesskit.New(agent, harnesskit.Options{Agent: "calc", Model: "gpt-4.1", ToolCalls: true})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("POST", "/runs", strings.NewReader(`{"input":{"question":"2+2?"}}`)))
	var created harnesskit.RunCreated
	_ = json.Unmarshal(rec.Body.Bytes(), &created)
	if _, err := srv.Wait(context.Background(), created.RunID); err != nil {
		log.Fatal(err)
	}
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/runs/"+created.RunID+"/trajectory", nil))
	var traj struct {
		SchemaVersion string `json:"schema_version"`
		Steps         []struct {
			Source    string `json:"source"`
			Message   string `json:"message"`
			ToolCalls []struct {
				FunctionName string `json:"function_name"`
			} `json:"tool_calls"`
		} `json:"steps"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &traj)
	fmt.Println(traj.SchemaVersion)
	for _, s := range traj.Steps {
		fmt.Printf("%s %q %d tool call(s)\n", s.Source, s.Message, len(s.ToolCalls))
	}
	// Output:
	// ATIF-v1.7
	// user "2+2?" 0 tool call(s)
	// agent "" 1 tool call(s)
	// agent "2 + 2 = 4" 0 tool call(s)
}
