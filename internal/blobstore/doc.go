// Package blobstore keeps gyre's blobs (fixtures, trajectories, gateway
// bodies, artifacts, exports) in a bucket opened by URL, on top of
// gocloud.dev/blob.
//
// Two kinds of bucket are supported:
//
//   - file:///abs/dir — a local directory (created 0700 when missing). The
//     default, when no URL is given, is file://<data dir>/blobs.
//   - s3://bucket?… — Amazon S3 or any S3-compatible service.
//
// Both accept prefix=<p>/ to keep every key of this store under p/ (several
// deployments may then share one bucket). A file URL accepts nothing else.
// An s3 URL accepts exactly these query parameters; any other is an error:
//
//   - endpoint: the service's base URL with its scheme, e.g.
//     http://127.0.0.1:9000. When set, every request goes there: the EC2
//     instance metadata service is never consulted, the region defaults to
//     us-east-1, and request checksums default to when_required (what most
//     S3-compatible services expect).
//   - use_path_style: true to address the bucket as endpoint/bucket/key
//     rather than bucket.endpoint/key; most S3-compatible services need it.
//   - region: the signing region (otherwise AWS_REGION or the shared config).
//   - profile: a profile of the shared AWS config files.
//   - anonymous: true to send unsigned requests.
//   - request_checksum_calculation, response_checksum_validation:
//     when_supported or when_required.
//
// Credentials come from the standard AWS chain: AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), then the shared config
// files; without an endpoint, also the container and instance roles.
//
// Keys are built by gyre only, never from customer strings (SPEC §2), and
// are checked by ValidateKey: slash-separated segments of
// [A-Za-z0-9._-] that do not start with a dot. Content-addressed objects
// live at <prefix>/<sha256> (PutContent, KeyFor); fixtures at
// fixtures/<tenant>/<sha256> (FixtureKey).
package blobstore
