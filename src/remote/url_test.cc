#include "saturate/remote/url.h"

#include <gtest/gtest.h>

#include <map>

#include "base/testing.h"

namespace saturate::remote {
namespace {

using saturate::testing::HasError;

TEST(ObjectUrl, ParsesS3BucketAndPrefix) {
  SATURATE_ASSERT_OK_AND_ASSIGN(ObjectUrl u, ParseObjectUrl("s3://my-bucket/a/b/"));
  EXPECT_EQ(u.scheme, Scheme::kS3);
  EXPECT_EQ(u.bucket, "my-bucket");
  EXPECT_EQ(u.prefix, "a/b");
  EXPECT_EQ(u.Key("manifest.json"), "a/b/manifest.json");
  EXPECT_EQ(u.Describe("x"), "s3://my-bucket/a/b/x");
  SATURATE_ASSERT_OK_AND_ASSIGN(ObjectUrl root, ParseObjectUrl("s3://bucket"));
  EXPECT_EQ(root.prefix, "");
  EXPECT_EQ(root.Key("m"), "m");
}

TEST(ObjectUrl, ParsesHttp) {
  SATURATE_ASSERT_OK_AND_ASSIGN(ObjectUrl u, ParseObjectUrl("http://127.0.0.1:8000/data/set/"));
  EXPECT_EQ(u.scheme, Scheme::kHttp);
  EXPECT_EQ(u.http_base, "http://127.0.0.1:8000/data/set");
  EXPECT_EQ(u.Describe("manifest.json"), "http://127.0.0.1:8000/data/set/manifest.json");
  SATURATE_ASSERT_OK_AND_ASSIGN(ObjectUrl s, ParseObjectUrl("https://example.com"));
  EXPECT_EQ(s.scheme, Scheme::kHttps);
  EXPECT_EQ(s.http_base, "https://example.com");
}

TEST(ObjectUrl, RejectsBadUrls) {
  EXPECT_TRUE(
      HasError(ParseObjectUrl("s3://").status(), StatusCode::kInvalidArgument, {"no bucket"}));
  EXPECT_TRUE(HasError(ParseObjectUrl("s3://AB/x").status(), StatusCode::kInvalidArgument,
                       {"not a valid S3 bucket name"}));
  EXPECT_TRUE(
      HasError(ParseObjectUrl("s3://bucket/a//b").status(), StatusCode::kInvalidArgument, {"//"}));
  EXPECT_TRUE(HasError(ParseObjectUrl("ftp://x/y").status(), StatusCode::kInvalidArgument,
                       {"not a remote dataset URL"}));
  EXPECT_TRUE(
      HasError(ParseObjectUrl("http:///x").status(), StatusCode::kInvalidArgument, {"no host"}));
  EXPECT_TRUE(HasError(ParseObjectUrl("http://u:p@h/x").status(), StatusCode::kInvalidArgument,
                       {"user info"}));
  EXPECT_TRUE(HasError(ParseObjectUrl("s3://bucket/a b").status(), StatusCode::kInvalidArgument,
                       {"space"}));
  EXPECT_FALSE(IsRemoteUrl("/data/set"));
  EXPECT_TRUE(IsRemoteUrl("s3://b/x"));
}

TEST(IniSection, ReadsKeysOfOneSection) {
  const char* text =
      "# comment\n[default]\naws_access_key_id = AK\n aws_secret_access_key=SK \n"
      "[other]\nx = 1\n";
  SATURATE_ASSERT_OK_AND_ASSIGN(auto d, ParseIniSection(text, "default"));
  EXPECT_EQ(d["aws_access_key_id"], "AK");
  EXPECT_EQ(d["aws_secret_access_key"], "SK");
  EXPECT_EQ(d.count("x"), 0u);
  EXPECT_EQ(ParseIniSection(text, "missing").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(HasError(ParseIniSection("[a]\nnovalue\n", "a").status(),
                       StatusCode::kInvalidArgument, {"line 2"}));
}

// A fake environment and file system.
struct FakeSources {
  std::map<std::string, std::string> env, files;
  ConfigSources Get() {
    return {[this](const char* n) -> const char* {
              auto it = env.find(n);
              return it == env.end() ? nullptr : it->second.c_str();
            },
            [this](const std::string& p) -> Result<std::string> {
              auto it = files.find(p);
              if (it == files.end()) return Status::NotFound(p);
              return it->second;
            }};
  }
};

TEST(ResolveS3Config, EnvironmentWins) {
  FakeSources f;
  f.env = {{"AWS_ACCESS_KEY_ID", "AKID"},
           {"AWS_SECRET_ACCESS_KEY", "SECRET"},
           {"AWS_SESSION_TOKEN", "TOK"},
           {"AWS_DEFAULT_REGION", "eu-west-1"},
           {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"},
           {"HOME", "/home/u"}};
  f.files["/home/u/.aws/credentials"] =
      "[default]\naws_access_key_id=FILE\naws_secret_access_key=F\n";
  SATURATE_ASSERT_OK_AND_ASSIGN(S3Config c, ResolveS3Config(f.Get(), ""));
  EXPECT_EQ(c.credentials.access_key_id, "AKID");
  EXPECT_EQ(c.credentials.session_token, "TOK");
  EXPECT_EQ(c.region, "eu-west-1");
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(c.source, "environment");
  // Describe never shows key material.
  EXPECT_EQ(c.Describe().find("SECRET"), std::string::npos);
  EXPECT_EQ(c.Describe().find("AKID"), std::string::npos);
  SATURATE_ASSERT_OK_AND_ASSIGN(S3Config flag, ResolveS3Config(f.Get(), "http://h:1"));
  EXPECT_EQ(flag.endpoint, "http://h:1");
}

TEST(ResolveS3Config, ProfileFromHomeAndRegionFromConfig) {
  FakeSources f;
  f.env = {{"HOME", "/home/u"}, {"AWS_PROFILE", "work"}};
  f.files["/home/u/.aws/credentials"] =
      "[default]\naws_access_key_id=D\naws_secret_access_key=DS\n"
      "[work]\naws_access_key_id = W\naws_secret_access_key = WS\n";
  f.files["/home/u/.aws/config"] = "[profile work]\nregion = ap-south-1\n";
  SATURATE_ASSERT_OK_AND_ASSIGN(S3Config c, ResolveS3Config(f.Get(), ""));
  EXPECT_EQ(c.credentials.access_key_id, "W");
  EXPECT_EQ(c.credentials.secret_access_key, "WS");
  EXPECT_EQ(c.region, "ap-south-1");
  EXPECT_EQ(c.endpoint, "");
  EXPECT_NE(c.source.find("work"), std::string::npos);
}

TEST(ResolveS3Config, DefaultsAndErrors) {
  FakeSources none;
  none.env = {{"HOME", "/nowhere"}};
  SATURATE_ASSERT_OK_AND_ASSIGN(S3Config c, ResolveS3Config(none.Get(), ""));
  EXPECT_TRUE(c.credentials.empty());
  EXPECT_EQ(c.region, "us-east-1");

  FakeSources half;
  half.env = {{"AWS_ACCESS_KEY_ID", "A"}};
  EXPECT_TRUE(HasError(ResolveS3Config(half.Get(), "").status(), StatusCode::kInvalidArgument,
                       {"AWS_SECRET_ACCESS_KEY"}));
  FakeSources missing;
  missing.env = {{"HOME", "/h"}, {"AWS_PROFILE", "nope"}};
  missing.files["/h/.aws/credentials"] =
      "[default]\naws_access_key_id=a\naws_secret_access_key=b\n";
  EXPECT_TRUE(HasError(ResolveS3Config(missing.Get(), "").status(), StatusCode::kInvalidArgument,
                       {"nope"}));
  EXPECT_TRUE(HasError(ResolveS3Config(none.Get(), "127.0.0.1:9000").status(),
                       StatusCode::kInvalidArgument, {"http://"}));
}

}  // namespace
}  // namespace saturate::remote
