package harnesskit

import _ "embed"

// ContractJSON is harness-api-v1.json, the OpenAPI 3.1 document of Harness
// API v1, byte for byte as published. Callers must not modify it; they pass
// it to an OpenAPI validator to check a harness's responses. A test pins its
// SHA-256 (ContractSHA256), so any edit fails the build.
//
//go:embed harness-api-v1.json
var ContractJSON []byte

// ContractSHA256 is the lowercase hex SHA-256 of ContractJSON's bytes.
const ContractSHA256 = "1969e5c5ec9e7e5d79ef66df4cf07d19aa3c6e34df7244f1a3e19df3e6a93da2"

// ContractVersion is the Harness API version these types implement: the
// contract's info.version and the default of Capabilities.ContractVersion.
const ContractVersion = "v1"
