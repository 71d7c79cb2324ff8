package flywheel

import (
	_ "embed"
	"slices"
)

// ContractJSON is flywheel-1.json, byte for byte as published: the authority
// for every type and rule in this package. Callers must not modify it. A test
// pins its SHA-256 (ContractSHA256), so any edit fails the build.
//
//go:embed flywheel-1.json
var ContractJSON []byte

// ContractSHA256 is the lowercase hex SHA-256 of ContractJSON's bytes.
const ContractSHA256 = "073b637482a7ffb86d0cc4c1a6065135b72d2003e388cd7d9df914dd98f334be"

// ContractVersion is the contract's x-contract-version.
const ContractVersion = "flywheel/1"

// SchemaID is the contract's $id; definitions live at SchemaID + "#/$defs/<Def>".
const SchemaID = "https://schemas.percepteye.ai/flywheel/1.json"

// Def names one entry of the contract's $defs: the body shapes the contract
// defines.
type Def string

// The contract's definitions.
const (
	DefToolCallRecord      Def = "ToolCallRecord"
	DefProductionTurn      Def = "ProductionTurn"
	DefProductionTurnBatch Def = "ProductionTurnBatch"
	DefExclusion           Def = "Exclusion"
	DefRolloutRequest      Def = "RolloutRequest"
	DefRolloutOutput       Def = "RolloutOutput"
	DefClaimResponse       Def = "ClaimResponse"
)

// Defs lists every definition, in the contract's order.
var Defs = []Def{
	DefToolCallRecord,
	DefProductionTurn,
	DefProductionTurnBatch,
	DefExclusion,
	DefRolloutRequest,
	DefRolloutOutput,
	DefClaimResponse,
}

// Valid reports whether d is one of Defs.
func (d Def) Valid() bool { return slices.Contains(Defs, d) }

// SchemaURL is the absolute URL of d's schema inside the contract.
func (d Def) SchemaURL() string { return SchemaID + "#/$defs/" + string(d) }
