package node

import (
	"fmt"
	"os"

	"github.com/kithmesh/kith/delegation"
	"github.com/kithmesh/kith/delegation/executor"
	"github.com/kithmesh/kith/node/config"
	"github.com/kithmesh/kith/protocol"
)

// profiles builds the engine's profiles from the config's.
func profiles(cfg config.Config) ([]delegation.Profile, error) {
	var out []delegation.Profile
	for _, p := range cfg.Profiles {
		var ex executor.Executor
		switch p.Executor {
		case config.ExecutorEcho:
			ex = executor.Echo{}
		case config.ExecutorExec:
			ex = executor.Exec{Command: p.Command, Dir: p.Dir, Env: p.Env}
		case config.ExecutorOpenAI:
			o := executor.OpenAI{BaseURL: p.URL, Model: p.Model, System: p.System}
			if p.APIKeyEnv != "" {
				o.APIKey = os.Getenv(p.APIKeyEnv)
			}
			ex = o
		case config.ExecutorA2A:
			a := &executor.A2A{URL: p.URL}
			if p.APIKeyEnv != "" {
				a.Token = os.Getenv(p.APIKeyEnv)
			}
			ex = a
		default:
			return nil, fmt.Errorf("node: profile %q: unknown executor %q", p.Name, p.Executor)
		}
		out = append(out, delegation.Profile{
			Profile: protocol.Profile{
				Name: p.Name, Description: p.Description, Skills: p.Skills,
				MaxBudgetTokens: p.EffectiveMaxBudgetTokens(), VRAMMiB: p.VRAMMiB,
			},
			Timeout:  p.EffectiveTimeout(cfg.Limits),
			MinTrust: p.Trust(),
			Executor: ex,
		})
	}
	return out, nil
}
