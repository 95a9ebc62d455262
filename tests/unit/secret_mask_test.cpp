// What --dry-run hides (launcher/output/secret_mask.h), held against real
// variable names from CI systems, cloud SDKs and tools
// (data/secret_env_names.txt), ordinary variables with typical values, some
// named close to a secret (data/ordinary_env.txt), and ordinary values of
// every shape (data/ordinary_values.txt).
#include "output/secret_mask.h"

#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

using dlaunch::argument_secret_kind;
using dlaunch::looks_like_token;
using dlaunch::secret_kind;
using dlaunch::SecretMask;
using dlaunch::value_secret_kind;

namespace {

// The lines of a data file that are neither blank nor comments.
std::vector<std::string> data_lines(const std::string& file) {
  std::ifstream in(std::string(UNIT_DATA_DIR) + "/" + file);
  EXPECT_TRUE(in) << file;
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') out.push_back(line);
  }
  return out;
}

std::string kind_text(const std::optional<std::string>& kind) {
  return kind ? *kind : std::string("(shown)");
}

std::string random_text(std::mt19937& rng, std::string_view alphabet, std::size_t n) {
  std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += alphabet[pick(rng)];
  return s;
}

constexpr std::string_view kUpper = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
constexpr std::string_view kLetters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
constexpr std::string_view kBase62 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
constexpr std::string_view kBase64 =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr std::string_view kBase64Url =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

}  // namespace

TEST(DryRun, EveryVariableNamedLikeASecretIsHidden) {
  const auto lines = data_lines("secret_env_names.txt");
  EXPECT_GE(lines.size(), 80u);
  for (const auto& line : lines) {
    const std::string name = line.substr(0, line.find(' '));
    EXPECT_EQ(kind_text(secret_kind(name, "s3cr3t-value")), "named like a secret") << line;
  }
}

TEST(DryRun, OrdinaryVariablesAreShownEvenWhenNamedCloseToASecret) {
  const auto lines = data_lines("ordinary_env.txt");
  EXPECT_GE(lines.size(), 80u);
  for (const auto& line : lines) {
    const auto eq = line.find('=');
    const auto source = line.find("  # ");
    ASSERT_NE(eq, std::string::npos) << line;
    ASSERT_NE(source, std::string::npos) << line;
    const std::string name = line.substr(0, eq);
    const std::string value = line.substr(eq + 1, source - eq - 1);
    EXPECT_EQ(kind_text(secret_kind(name, value)), "(shown)") << line;
  }
}

TEST(DryRun, OrdinaryValuesAreShownWhateverTheirShape) {
  const auto lines = data_lines("ordinary_values.txt");
  EXPECT_GE(lines.size(), 50u);
  for (const auto& value : lines)
    EXPECT_EQ(kind_text(value_secret_kind(value)), "(shown)") << value;
}

// A variable named like a secret that holds only a switch says nothing secret.
TEST(DryRun, AFlagNamedLikeASecretIsShown) {
  for (const char* v : {"", "0", "1", "true", "False", "yes", "no", "on", "OFF"})
    EXPECT_FALSE(secret_kind("HF_HUB_DISABLE_IMPLICIT_TOKEN", v)) << v;
  EXPECT_TRUE(secret_kind("HF_HUB_DISABLE_IMPLICIT_TOKEN", "2"));
}

TEST(DryRun, AUrlWithAPasswordIsHidden) {
  for (const char* v : {
           "postgres://app:hunter2@db.internal:5432/train",
           "postgresql://app:p%40ss@db.internal/train?sslmode=require",
           "mongodb+srv://app:pw@cluster0.example.mongodb.net/?retryWrites=true",
           "redis://:pw@cache.internal:6379/0",
           "amqp://guest:guest@rabbit.internal:5672/",
           "http://alice:pw@proxy.internal:3128",
           "https://x-access-token:abc@github.com/example/train.git",
           "pip install --index-url https://u:pw@pkgs.example.com/simple torch",
       }) {
    EXPECT_EQ(kind_text(secret_kind("SOME_SETTING", v)), "URL with a password") << v;
  }
}

// A user part that is no login name is the credential itself: a token as the
// user (git over HTTPS), Sentry's key in its DSN.
TEST(DryRun, AUrlWithATokenAsItsUserIsHidden) {
  for (const char* v : {
           "https://ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6@github.com/example/train.git",
           "https://0123456789abcdef0123456789abcdef@o123456.ingest.sentry.io/4504",
           "https://Zx81Ab@gitlab.example.com/train.git",
       }) {
    EXPECT_EQ(kind_text(secret_kind("REMOTE", v)), "URL with credentials") << v;
  }
  EXPECT_FALSE(secret_kind("REMOTE", "ssh://git@github.com/example/train.git"));
  EXPECT_FALSE(secret_kind("DATABASE_URL", "postgres://postgres@localhost/train"));
}

TEST(DryRun, WebhookUrlsAreHiddenWhateverTheirName) {
  const std::pair<const char*, const char*> cases[] = {
      {"https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
       "Slack webhook URL"},
      {"https://discord.com/api/webhooks/123456789012345678/abcdefghijklmnopqrstuvwxyz",
       "Discord webhook URL"},
      {"https://discordapp.com/api/webhooks/123456789012345678/abcdefghijklmnopqrstuvwxyz",
       "Discord webhook URL"},
      {"https://example.webhook.office.com/webhookb2/abc@def/IncomingWebhook/123/456",
       "Microsoft Teams webhook URL"},
  };
  for (const auto& [value, kind] : cases)
    EXPECT_EQ(kind_text(secret_kind("NOTIFY", value)), kind) << value;
}

TEST(DryRun, ConnectionStringsAndFieldsWithASecretAreHidden) {
  const std::pair<const char*, const char*> cases[] = {
      {"Server=tcp:db.example.net,1433;Database=train;User ID=app;Password=pw;",
       "secret in Password="},
      {"Driver={ODBC Driver 18};Server=db;Uid=sa;Pwd=pw;", "secret in Pwd="},
      {"host=db.internal user=app password=pw dbname=train", "secret in password="},
      {"DefaultEndpointsProtocol=https;AccountName=data;AccountKey=c2VjcmV0==;"
       "EndpointSuffix=core.windows.net",
       "secret in AccountKey="},
      {"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=abc=",
       "secret in SharedAccessKey="},
      {"jdbc:mysql://db.internal/train?user=app&password=pw", "secret in password="},
      {"https://data.blob.core.windows.net/c/x?sv=2022-11-02&sp=r&sig=abc%3D", "secret in sig="},
      {"https://bucket.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Signature=abc",
       "secret in X-Amz-Signature="},
      {"-Djavax.net.ssl.trustStorePassword=changeit -Xmx4g",
       "secret in -Djavax.net.ssl.trustStorePassword="},
      {"--lr 3e-4 --hf-token=abc", "secret in --hf-token="},
      {"--lr 3e-4 --hf-token abc", "secret after --hf-token"},
      {R"({"type": "service_account", "client_secret": "abc"})", "secret in \"client_secret\""},
  };
  for (const auto& [value, kind] : cases)
    EXPECT_EQ(kind_text(secret_kind("SETTINGS", value)), kind) << value;
}

TEST(DryRun, JwtsAreHidden) {
  const std::string jwt =
      "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJwcm9qZWN0X3BhdGg6ZXhhbXBsZSJ9."
      "c2lnbmF0dXJlLWJ5dGVzLWhlcmU";
  EXPECT_EQ(kind_text(secret_kind("ID", jwt)), "JWT");
  EXPECT_EQ(kind_text(secret_kind("ID", "Authorization: Bearer " + jwt)), "authorization header");
}

TEST(DryRun, PrivateKeysAndAuthorizationHeadersAreHidden) {
  EXPECT_EQ(kind_text(secret_kind("DEPLOY",
                                  "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n"
                                  "-----END OPENSSH PRIVATE KEY-----")),
            "private key");
  EXPECT_EQ(kind_text(secret_kind("HEADERS", "Authorization: Basic YWxpY2U6cHc=")),
            "authorization header");
}

// Each vendor's published prefix, with a random body of its documented shape.
TEST(DryRun, TokensOfPublishedFormatsAreHiddenWhateverTheirName) {
  std::mt19937 rng(27);
  const std::string tokens[] = {
      "ghp_" + random_text(rng, kBase62, 36),
      "github_pat_11" + random_text(rng, kBase62, 20) + "_" + random_text(rng, kBase62, 59),
      "glpat-" + random_text(rng, kBase62, 20),
      "hf_" + random_text(rng, kLetters, 34),
      "AKIA" + random_text(rng, kUpper, 16),
      "AIza" + random_text(rng, kBase64Url, 35),
      "xoxb-1234567890-1234567890123-" + random_text(rng, kBase62, 24),
      "npm_" + random_text(rng, kBase62, 36),
      "pypi-AgEIcHlwaS5vcmc" + random_text(rng, kBase64Url, 60),
      "sk_live_" + random_text(rng, kBase62, 24),
      "sk-proj-" + random_text(rng, kBase64Url, 48),
  };
  for (const auto& t : tokens) {
    EXPECT_TRUE(looks_like_token(t)) << t;
    EXPECT_EQ(kind_text(secret_kind("X", t)), "looks like a token") << t;
    EXPECT_EQ(kind_text(secret_kind("ARGS", "--lr 3e-4 " + t)), "looks like a token") << t;
  }
}

// The entropy rule, for tokens of no known format: measured on random text
// of each alphabet tokens are made of. Shorter and plainer ones escape it
// more often (docs/environment.md gives the rates); names do not matter.
TEST(DryRun, MostRandomTokensOfUnknownFormatsAreHidden) {
  std::mt19937 rng(6);
  struct Case {
    std::string_view alphabet;
    std::size_t length;
    int at_least;  // of 1000
  };
  const Case cases[] = {
      {kBase62, 24, 930},  {kBase62, 32, 960}, {kBase62, 40, 975}, {kBase62, 64, 990},
      {kLetters, 34, 920}, {kBase64, 40, 950}, {kBase64, 88, 970}, {kBase64Url, 43, 970},
  };
  for (const auto& c : cases) {
    int hidden = 0;
    for (int i = 0; i < 1000; ++i)
      hidden += looks_like_token(random_text(rng, c.alphabet, c.length));
    EXPECT_GE(hidden, c.at_least) << c.alphabet << " x " << c.length;
  }
}

// The program's arguments go through the same rules, and a value given as the
// next argument of an option named like a secret is hidden too.
TEST(DryRun, ArgumentsThatAreOrFollowASecretAreHidden) {
  EXPECT_EQ(kind_text(argument_secret_kind("--hf-token", "abc")), "secret after --hf-token");
  EXPECT_EQ(kind_text(argument_secret_kind("--db", "postgres://a:b@db/x")), "URL with a password");
  EXPECT_EQ(kind_text(argument_secret_kind("-e", "HF_TOKEN=abc")), "secret in HF_TOKEN=");
  EXPECT_FALSE(argument_secret_kind("--use-auth-token", "false"));
  EXPECT_FALSE(argument_secret_kind("--max-new-tokens", "512"));
  EXPECT_FALSE(argument_secret_kind("--hf-token", "--lr"));
  EXPECT_FALSE(argument_secret_kind("", "train.py"));
  SecretMask mask(false);
  EXPECT_EQ(mask.argument("--api-key", "k3y"), "<hidden: secret after --api-key, 3 chars>");
  EXPECT_EQ(mask.argument("--model", "meta-llama/Llama-3.1-8B"), "meta-llama/Llama-3.1-8B");
  EXPECT_EQ(mask.hidden(), 1);
}

TEST(DryRun, AHiddenValueSaysWhatItWasAndHowLong) {
  SecretMask mask(false);
  EXPECT_EQ(mask("HF_TOKEN", "hf_abc"), "<hidden: named like a secret, 6 chars>");
  EXPECT_EQ(mask("DATABASE_URL", "postgres://a:b@db/x"), "<hidden: URL with a password, 19 chars>");
  EXPECT_EQ(mask("DB_PASSWORD", "pässwört"), "<hidden: named like a secret, 8 chars>");
  EXPECT_EQ(mask("NOTE", "it's fine"), "'it'\\''s fine'");
  EXPECT_EQ(mask.hidden(), 3);
  SecretMask shown(true);
  EXPECT_EQ(shown("HF_TOKEN", "hf_abc"), "hf_abc");
  EXPECT_EQ(shown.hidden(), 0);
}
