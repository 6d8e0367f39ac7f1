// Unit tests of the chat-template engine. Expected strings were produced by jinja2 3.1 with
// transformers' settings; the full parity runs live in tests/template/ (against transformers).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <ctime>
#include <thread>

#include "mlxrt/template/chat_template.h"
#include "mlxrt/template/value.h"

namespace mlxrt::tmpl {
namespace {

using nlohmann::ordered_json;

std::string render(const std::string& source, const ordered_json& context = ordered_json::object(),
                   const RenderLimits& limits = {}) {
  return ChatTemplate::parse(source, "t").render_with_context(context, limits);
}

TEST(ChatTemplate, LoopVariablesAndControl) {
  ordered_json ctx = {{"xs", {1, 2}}};
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.length }}|{% endfor %}", ctx),
            "102TrueFalse2|211FalseTrue2|");
  EXPECT_EQ(render("{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{% else %}none{% endfor %}",
                   {{"xs", {1, 2, 3}}}),
            "2132");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
                   "{% endif %}{{ x }}{% endfor %}", {{"xs", {1, 2, 3, 4, 5}}}),
            "13");
  EXPECT_EQ(render("{% set n = 0 %}{% for x in xs %}{% set n = n + x %}{% endfor %}{{ n }}", ctx), "0");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}", ctx),
            "3");
}

TEST(ChatTemplate, WhitespaceControlFollowsTransformersSettings) {
  EXPECT_EQ(render("a\n  {% if true %}\n    b\n  {% endif %}\nc"), "a\n    b\nc");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("x {{- ' y ' -}} z"), "x y z");
  EXPECT_EQ(render("  {%+ if true %}k{% endif %}"), "  k");
  EXPECT_EQ(render("{# c #}\n  {# d #}\nx"), "x");
  EXPECT_EQ(render("line\n"), "line");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

TEST(ChatTemplate, MacrosCallerFilterAndSetBlocks) {
  EXPECT_EQ(render("{% macro m(a, b='B') %}[{{ a }}{{ b }}{{ varargs }}{{ kwargs }}]{% endmacro %}"
                   "{{ m(1) }}{{ m(1, 2, 3, z=4) }}{{ m(b=5, a=6) }}"),
            "[1B(){}][12(3,){'z': 4}][65(){}]");
  EXPECT_EQ(render("{% macro w() %}<{{ caller('x') }}>{% endmacro %}{% call(v) w() %}in {{ v }}{% endcall %}"),
            "<in x>");
  EXPECT_EQ(render("{% filter upper %}abc {{ 'd' }}{% endfilter %}"), "ABC D");
  EXPECT_EQ(render("{% set x %}  block {{ 1 }}  {% endset %}[{{ x }}]{% set y | trim %}  t  {% endset %}[{{ y }}]"),
            "[  block 1  ][t]");
  EXPECT_EQ(render("{% raw %}{{ not }}{% endraw %}"), "{{ not }}");
}

TEST(ChatTemplate, PythonPrinting) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5, {'k': [2]}] }}"), "[1, 'a', None, True, 1.5, {'k': [2]}]");
  EXPECT_EQ(render("{{ ('a',) }}{{ \"it's\" }}{{ [\"it's\", 'n\\n'] }}"), "('a',)it's[\"it's\", 'n\\n']");
  EXPECT_EQ(render("{{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1/3 }} {{ 10/2 }} {{ -7//2 }} {{ -7 % 3 }}"),
            "1e+16 1000000000000000.0 0.0001 1e-05 0.3333333333333333 5.0 -4 2");
  EXPECT_EQ(detail::float_repr(2.5e-7), "2.5e-07");
  EXPECT_EQ(detail::float_repr(123456789.125), "123456789.125");
}

TEST(ChatTemplate, StrftimeNowFormatsTheCurrentTime) {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string year = std::to_string(1900 + local.tm_year);
  EXPECT_EQ(render("{{ strftime_now('%Y') }}"), year);
  EXPECT_THROW(render("{{ strftime_now(3) }}"), TemplateRenderError);
}

TEST(ChatTemplate, TojsonUsesTransformersArguments) {
  ordered_json ctx = {{"x", {{"b", {1, 2.0, nullptr, true}}, {"a", "q\"\n"}}}};
  EXPECT_EQ(render("{{ x | tojson }}", ctx), "{\"b\": [1, 2.0, null, true], \"a\": \"q\\\"\\n\"}");
  EXPECT_EQ(render("{{ x | tojson(sort_keys=true) }}", ctx), "{\"a\": \"q\\\"\\n\", \"b\": [1, 2.0, null, true]}");
  EXPECT_EQ(render("{{ {'a': [1]} | tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(render("{{ 'é' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) }}"), "\"é\"|\"\\u00e9\"");
}

TEST(ChatTemplate, UndefinedBehavesLikeJinja2) {
  ordered_json ctx = {{"d", ordered_json::object()}};
  EXPECT_EQ(render("{{ u }}|{{ d.missing }}|{{ d.missing is defined }}|{{ u | length }}|{{ 'x' ~ u ~ 'y' }}", ctx),
            "||False|0|xy");
  EXPECT_THROW(render("{{ d.missing.deeper }}", ctx), TemplateRenderError);
  EXPECT_THROW(render("{{ u + 1 }}"), TemplateRenderError);
}

TEST(ChatTemplate, ErrorsCarryLineAndColumn) {
  try {
    render("ok\n{% for x in xs %}\n{{ x }");
    FAIL() << "expected a syntax error";
  } catch (const TemplateSyntaxError& e) {
    EXPECT_EQ(e.name(), "t");
    EXPECT_EQ(e.line(), 3);
    EXPECT_NE(std::string(e.what()).find("t:3:"), std::string::npos) << e.what();
  }
  try {
    render("a\n  {{ 1 + 'x' }}");
    FAIL() << "expected a render error";
  } catch (const TemplateRenderError& e) {
    EXPECT_EQ(e.line(), 2);
    EXPECT_EQ(e.column(), 6);
  }
  try {
    render("{% if true %}\n{{ raise_exception('no system role') }}{% endif %}");
    FAIL() << "expected raise_exception";
  } catch (const TemplateRaised& e) {
    EXPECT_EQ(e.detail(), "no system role");
    EXPECT_EQ(e.line(), 2);
  }
  EXPECT_THROW(render("{% do x %}"), TemplateSyntaxError);
  EXPECT_THROW(render("{{ x | nosuchfilter }}"), TemplateSyntaxError);
  EXPECT_EQ(render("{% if false %}{{ x | nosuchfilter }}{% endif %}ok"), "ok");
}

TEST(ChatTemplate, SandboxLimits) {
  RenderLimits small;
  small.max_loop_iterations = 1000;
  small.max_output_bytes = 1 << 16;
  small.max_call_depth = 20;
  EXPECT_THROW(render("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}", {}, small),
               TemplateRenderError);
  EXPECT_THROW(render("{% for i in range(900) %}{{ 'x' * 100 }}{% endfor %}", {}, small), TemplateRenderError);
  EXPECT_THROW(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}, small), TemplateRenderError);
  EXPECT_THROW(render("{{ range(1000000) | length }}"), TemplateRenderError);
  EXPECT_THROW(render("{{ 'x' * 100000000000 }}"), TemplateRenderError);
  EXPECT_THROW(render("{{ xs.append(1) }}", {{"xs", ordered_json::array()}}), TemplateRenderError);
  std::string deep(5000, '(');
  EXPECT_THROW(render("{{ " + deep + " }}"), TemplateSyntaxError);
}

TEST(ChatTemplate, RenderNormalisesMessagesAsTransformers) {
  auto t = ChatTemplate::parse("{% for m in messages %}{{ m | tojson }};{% endfor %}{{ bos_token }}{{ tools }}"
                               "{{ add_generation_prompt }}{{ enable_thinking }}");
  ordered_json messages = ordered_json::parse(
      R"([{"role": "assistant", "content": "x", "tool_calls": null, "reasoning": "r"}])");
  ChatTemplateOptions opts;
  opts.add_generation_prompt = true;
  opts.extra = {{"enable_thinking", false}, {"bos_token", "<B>"}};
  EXPECT_EQ(t.render(messages, opts, {{"bos_token", "<s>"}}),
            "{\"thinking\": \"r\", \"role\": \"assistant\", \"content\": \"x\", \"reasoning\": \"r\", "
            "\"reasoning_content\": \"r\"};<B>NoneTrueFalse");
  EXPECT_THROW(t.render(ordered_json::array(), opts, nullptr), UsageError);
}

TEST(ChatTemplate, ConcurrentRendersShareOneParsedTemplate) {
  auto t = ChatTemplate::parse("{% for m in messages %}{{ m.content | upper }}{% endfor %}");
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      ordered_json messages = {{{"role", "user"}, {"content", "m" + std::to_string(i)}}};
      for (int k = 0; k < 200; ++k)
        ok[i] += t.render(messages, {}, nullptr) == "M" + std::to_string(i);
    });
  }
  for (auto& th : threads) th.join();
  for (int v : ok) EXPECT_EQ(v, 200);
}

class ModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("mlxrt_tmpl_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::filesystem::path dir_;
};

TEST_F(ModelDir, ReadsNamedTemplatesAndAddedTokens) {
  write("tokenizer_config.json", R"({"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
    "pad_token": null, "chat_template": [{"name": "default", "template": "D{{ bos_token }}"},
    {"name": "tool_use", "template": "T{{ eos_token }}"}]})");
  auto t = read_model_chat_templates(dir_);
  EXPECT_EQ(t.special_tokens, ordered_json({{"bos_token", "<s>"}, {"eos_token", "</s>"}}));
  EXPECT_EQ(*select_chat_template(t, std::nullopt, false), "D{{ bos_token }}");
  EXPECT_EQ(*select_chat_template(t, std::nullopt, true), "T{{ eos_token }}");
  EXPECT_THROW(select_chat_template(t, std::string("nope"), false), UsageError);
  auto loaded = load_chat_template(dir_, std::string("tool_use"));
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->render({{{"role", "user"}, {"content", "x"}}}, {}, t.special_tokens), "T</s>");
}

TEST_F(ModelDir, TemplateFileTakesPriorityAndMissingTemplateIsNullopt) {
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  EXPECT_FALSE(load_chat_template(dir_));
  write("tokenizer_config.json", R"({"eos_token": "</s>", "chat_template": "config"})");
  write("chat_template.jinja", "file {{ eos_token }}\n");
  auto t = load_chat_template(dir_);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->render({{{"role", "user"}, {"content", "x"}}}, {}, read_special_tokens(dir_)), "file </s>");
  write("tokenizer_config.json", R"({"chat_template": 5})");
  std::filesystem::remove(dir_ / "chat_template.jinja");
  EXPECT_THROW(read_model_chat_templates(dir_), ConfigError);
}

}  // namespace
}  // namespace mlxrt::tmpl
