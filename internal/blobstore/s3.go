package blobstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// Network bounds for S3 requests. There is no whole-request timeout, since
// a body may stream for as long as it needs; callers bound with ctx.
const (
	s3DialTimeout           = 10 * time.Second
	s3TLSHandshakeTimeout   = 10 * time.Second
	s3ResponseHeaderTimeout = 60 * time.Second
	s3MaxAttempts           = 3
	// s3DefaultRegion signs requests to an explicit endpoint that names
	// no region; S3-compatible services accept any.
	s3DefaultRegion = "us-east-1"
)

// s3Params are the query parameters an s3 URL may carry (besides prefix).
var s3Params = map[string]bool{
	"endpoint":                     true,
	"use_path_style":               true,
	"region":                       true,
	"profile":                      true,
	"anonymous":                    true,
	"request_checksum_calculation": true,
	"response_checksum_validation": true,
}

// openS3 opens the bucket of an s3 URL; q holds its query parameters less
// prefix. It builds the AWS configuration itself rather than through
// s3blob's URL opener so that an explicit endpoint also turns off the
// instance metadata service and the network bounds are gyre's.
func openS3(ctx context.Context, u *url.URL, q url.Values) (*blob.Bucket, error) {
	name := u.Host
	if name == "" {
		return nil, errors.New("s3 url: no bucket (want s3://bucket?…)")
	}
	if !validBucketName(name) {
		return nil, fmt.Errorf("s3 url: invalid bucket name %q", name)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("s3 url: path %q not allowed (use prefix=)", u.Path)
	}
	if u.User != nil {
		return nil, errors.New("s3 url: credentials in the url are not allowed (use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
	}
	for k := range q {
		if !s3Params[k] {
			return nil, fmt.Errorf("s3 url: unknown parameter %q", k)
		}
	}

	endpoint := q.Get("endpoint")
	if endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return nil, fmt.Errorf("s3 url: endpoint %q must be an http:// or https:// url", endpoint)
		}
	}
	pathStyle, err := boolParam(q, "use_path_style")
	if err != nil {
		return nil, err
	}
	anonymous, err := boolParam(q, "anonymous")
	if err != nil {
		return nil, err
	}
	// Third-party services often reject the SDK's default streaming
	// checksums; with an explicit endpoint, send them only when required.
	reqChecksum := aws.RequestChecksumCalculationWhenSupported
	respChecksum := aws.ResponseChecksumValidationWhenSupported
	if endpoint != "" {
		reqChecksum = aws.RequestChecksumCalculationWhenRequired
		respChecksum = aws.ResponseChecksumValidationWhenRequired
	}
	switch v := q.Get("request_checksum_calculation"); v {
	case "":
	case "when_supported":
		reqChecksum = aws.RequestChecksumCalculationWhenSupported
	case "when_required":
		reqChecksum = aws.RequestChecksumCalculationWhenRequired
	default:
		return nil, fmt.Errorf("s3 url: request_checksum_calculation %q (want when_supported or when_required)", v)
	}
	switch v := q.Get("response_checksum_validation"); v {
	case "":
	case "when_supported":
		respChecksum = aws.ResponseChecksumValidationWhenSupported
	case "when_required":
		respChecksum = aws.ResponseChecksumValidationWhenRequired
	default:
		return nil, fmt.Errorf("s3 url: response_checksum_validation %q (want when_supported or when_required)", v)
	}

	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = s3DialTimeout }).
		WithTransportOptions(func(t *http.Transport) {
			t.TLSHandshakeTimeout = s3TLSHandshakeTimeout
			t.ResponseHeaderTimeout = s3ResponseHeaderTimeout
		})
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = s3MaxAttempts
				o.RateLimiter = ratelimit.None
			})
		}),
		config.WithRequestChecksumCalculation(reqChecksum),
		config.WithResponseChecksumValidation(respChecksum),
	}
	if r := q.Get("region"); r != "" {
		opts = append(opts, config.WithRegion(r))
	}
	if p := q.Get("profile"); p != "" {
		opts = append(opts, config.WithSharedConfigProfile(p))
	}
	if anonymous {
		opts = append(opts, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	}
	if endpoint != "" {
		// Never ask the instance metadata service for credentials or a
		// region when talking to a service that is not AWS.
		opts = append(opts, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	if cfg.Region == "" {
		if endpoint == "" {
			return nil, errors.New("s3 url: no region (add region= or set AWS_REGION)")
		}
		cfg.Region = s3DefaultRegion
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = pathStyle
	})
	b, err := s3blob.OpenBucket(ctx, client, name, &s3blob.Options{RequestChecksumCalculation: reqChecksum})
	if err != nil {
		return nil, fmt.Errorf("s3 bucket: %w", err)
	}
	return b, nil
}

func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("s3 url: %s=%q is not a boolean", name, v)
	}
	return b, nil
}

// validBucketName reports whether name is a plausible S3 bucket name:
// 3 to 63 of [a-z0-9.-], starting and ending with a letter or digit.
// S3-compatible services accept this set too.
func validBucketName(name string) bool {
	if len(name) < 3 || len(name) > 63 || strings.Contains(name, "..") {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !alnum && c != '.' && c != '-' {
			return false
		}
		if (i == 0 || i == len(name)-1) && !alnum {
			return false
		}
	}
	return true
}
