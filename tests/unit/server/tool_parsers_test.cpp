// The tool-call parsers against mlx-lm's own: every case (and every prefix and one-character
// deletion of it, the malformed texts a cut-off or noisy generation gives) goes through
// mlx_lm.tool_parsers.<name>.parse_tool_call at test time (tool_parser_oracle.py) and through ours;
// the result's JSON text, or the kind of exception, must be the same.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "mlxrt/server/python_json.h"
#include "mlxrt/server/python_values.h"
#include "mlxrt/server/tool_calls.h"
#include "mlxrt/server/tool_parsers.h"

namespace mlxrt::server {
namespace {

using Json = nlohmann::ordered_json;

const char* kTools = R"~([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}, "days": {"type": "integer"}, "temp": {"type": "number"},
  "metric": {"type": "boolean"}, "opts": {"type": "object"}, "tags": {"type": "array"}, "any": {},
  "when": {"anyOf": [{"type": "string"}, {"type": "null"}]}, "level": {"enum": [1, 2, 3]},
  "size": {"type": "int64"}, "ratio": {"type": "float"}, "items": {"type": "list[str]"}}}}},
  {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
  "properties": {"x": {"type": "string"}, "n": {"type": ["integer", "null"]}}}}}])~";

struct Case {
  const char* parser;
  std::string text;
  bool with_tools;
  bool mutate = true;  // also every prefix and one-code-point deletion
};

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

/** Deep nesting: Python's limits (the tokenizer's 200 brackets, json's recursion limit) and none
 * of ours running off the stack. */
std::vector<Case> deep_cases() {
  return {
      {"pythonic", "[f(x=" + repeat("[", 250) + repeat("]", 250) + ")]", false, false},
      {"pythonic", "[f(x=" + repeat("[", 150) + repeat("]", 150) + ")]", false, false},
      {"qwen3_coder",
       "<function=get_weather><parameter=opts>" + repeat("[", 5000) + repeat("]", 5000) + "</parameter></function>",
       true, false},
      {"glm47", "f<arg_key>a</arg_key><arg_value>" + repeat("-", 3000) + "1</arg_value>", false, false},
      {"glm47", "f<arg_key>a</arg_key><arg_value>" + repeat("(", 100000) + "</arg_value>", false, false},
      {"pythonic", "[f(a=" + repeat("1+", 5000) + "1)]", false, false},
      {"gemma4", "call:f{a:" + repeat("{b:", 3000) + "1" + repeat("}", 3000) + "}", false, false},
  };
}

std::vector<Case> base_cases() {
  return {
      // json_tools
      {"json_tools", "\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null]}}\n", false},
      {"json_tools", "[{\"name\": \"f\", \"arguments\": {}, \"id\": 7}]", false},
      {"json_tools", "{\"name\": \"f\", \"arguments\": NaN}", false},
      // qwen3_coder
      {"qwen3_coder",
       "\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n",
       true},
      {"qwen3_coder",
       "<function=get_weather><parameter=temp>21.5</parameter><parameter=metric>True</parameter>"
       "<parameter=opts>{\"a\": 1, \"b\": [true]}</parameter><parameter=tags>[1, 'x', (2, 3)]</parameter>"
       "<parameter=any>{\"k\": 1}</parameter><parameter=when>null</parameter><parameter=other>x</parameter>"
       "<parameter=size>4.0</parameter><parameter=ratio>2</parameter><parameter=items>['a']</parameter></function>",
       true},
      {"qwen3_coder", "<function=f><parameter=x>{'a': (1, 2)}</parameter><parameter=y>-0x1F</parameter></function>",
       false},
      {"qwen3_coder", "<function=get_weather><parameter=days>3.5</parameter></function>", true},
      {"qwen3_coder", "<function=get_weather><parameter=days>abc</parameter></function>", true},
      {"qwen3_coder", "<function=get_weather><parameter=temp>inf</parameter></function>", true},
      {"qwen3_coder", "<function=get_weather><parameter=temp>1_000.5</parameter><parameter=any>[1,</parameter></function>",
       true},
      {"qwen3_coder", "<function=f></function> trailing", false},
      {"qwen3_coder", "<function=a></function><function=b><parameter=q>1</parameter></function>", false},
      {"qwen3_coder", "<function=  spaced name><parameter= p >v</parameter></function>\n", false},
      {"qwen3_coder", "<function=f><parameter=opts>{\"a\": {1, 2}}</parameter></function>", false},
      {"qwen3_coder", "<function=get_weather><parameter=tags>{[1]: 2}</parameter></function>", true},
      {"qwen3_coder", "<function=get_weather><parameter=opts>{'é': \"\\u00e9\\n\"}</parameter></function>", true},
      // mistral
      {"mistral", "get_weather[ARGS]{\"city\": \"Paris\"}", false},
      {"mistral", "a[ARGS]{\"x\": 1}b-c [ARGS] {\"y\": [1, 2]} tail", false},
      {"mistral", "[{\"name\": \"f\", \"arguments\": {\"x\": 1}, \"id\": \"abc123def\"}]", false},
      {"mistral", "[{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}, {\"name\": \"g\"}]", false},
      {"mistral", "[{\"name\": 5}]", false},
      {"mistral", "[]", false},
      {"mistral", "f[ARGS]{\"a\": ", false},
      {"mistral", "f[ARGS]NaN g[ARGS]\"s\"", false},
      {"mistral", "no call here", false},
      // gemma4
      {"gemma4", "call:get_weather{city:<|\"|>Paris<|\"|>,days:3}", false},
      {"gemma4", "call:f{a:{b:<|\"|>x}y\"<|\"|>},c:[1,2]}call:g{}", false},
      {"gemma4", "call:f{a:<|\"|>unterminated}", false},
      {"gemma4", "call:f{a:b}", false},
      {"gemma4", "call:f-g{x:true,y:null,z:1.5e3,w:-2}", false},
      {"gemma4", "recall:f{\xC3\xA9t\xC3\xA9:1} call:h{<x:1}", false},
      {"gemma4", "call:f{a:<|\"|>call:g{b:1}<|\"|>", false},
      // function_gemma
      {"function_gemma", "call:get_weather{city:<escape>Paris<escape>,days:3}", false},
      {"function_gemma", "call:f{a:1,b:true,c:hello,d:[1,e:{\"k\": 2}", false},
      {"function_gemma", "call:f{}", false},
      {"function_gemma", "call:f{x}", false},
      {"function_gemma", "call:f{a:<escape>x}", false},
      {"function_gemma", "x call:-{a:1} call:g{a:<escape>p, q<escape>}", false},
      // pythonic
      {"pythonic", "[get_weather(city=\"Paris\", days=3)]", false},
      {"pythonic", "[a.b(x=[1, true, null], y={\"k\": false}), c(z=-1.5, w=(1,), v='it\\'s')]", false},
      {"pythonic", "[f(1)]", false},
      {"pythonic", "[f(x=foo, y=2)]", false},
      {"pythonic", "[f(x=\"a, b\", y=2, z='q')]", false},
      {"pythonic", "[f(x={[1]: 2})]", false},
      {"pythonic", "no call", false},
      {"pythonic", "[f(**k)]", false},
      {"pythonic", "[f(x=1, x=2), g()]", false},
      {"pythonic", "[f(x=1) g(y=2)]", false},
      {"pythonic", "[f(x=1e3, y=0x10, z=1_000, w=None, v=True)]", false},
      {"pythonic", "text [f(a=[1,2], b=\"x\")] after [", false},
      {"pythonic", "[get().x(a=1)]", false},
      {"pythonic", "[f(a=1 + 2j)]", false},
      {"pythonic", "[f(a=set())]", false},
      {"pythonic", "[import(a=1)]", false},
      // glm47 and laguna
      {"glm47",
       "get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
       "<arg_value>3</arg_value>\n",
       true},
      {"glm47",
       "f<arg_key>a</arg_key>\\n<arg_value>[1, 2]</arg_value><arg_key>b</arg_key><arg_value>{'x': 1}</arg_value>"
       "<arg_key>x</arg_key><arg_value>7</arg_value>",
       true},
      {"glm47", "{\"name\": \"get_weather\", \"arguments\": {\"city\": 5, \"days\": \"3\", \"tags\": [1]}}", true},
      {"glm47", "get_weather city=Paris days=3", true},
      {"glm47", "f a=\"x y\" b=2 c='it''s'", false},
      {"glm47", "f {\"a\": 1}", false},
      {"glm47", "f\n{\"a\": \"1\"}", true},
      {"glm47", "just some text", false},
      {"glm47", "", false},
      {"glm47", "{\"function\": {\"name\": \"f\", \"arguments\": {\"x\": 1}}, \"arguments\": null}", true},
      {"glm47", "[{\"tool\": {\"name\": \"t\", \"arguments\": \"{\\\"q\\\": [1]}\"}}]", false},
      {"glm47", "f<arg_key>a</arg_key>junk<arg_key>b</arg_key><arg_value>1</arg_value>", false},
      {"glm47", "get_weather x=\"unterminated", true},
      {"laguna", "f<arg_key>x</arg_key><arg_value>[1]</arg_value>", true},
      // kimi_k2
      {"kimi_k2",
       "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|>",
       false},
      {"kimi_k2",
       " <|tool_call_begin|> functions.a:1 <|tool_call_argument_begin|> {\"x\": 1} <|tool_call_end|>"
       "<|tool_call_begin|>b:22<|tool_call_argument_begin|>{'y': (1, 2)}<|tool_call_end|>",
       false},
      {"kimi_k2", "functions.f:1 <|tool_call_argument_begin|> {\"a\": 1} ", false},
      {"kimi_k2", "<|tool_call_begin|>bad<|tool_call_end|>", false},
      {"kimi_k2", "x:y:0<|tool_call_argument_begin|>not json", false},
      {"kimi_k2", "  :0<|tool_call_argument_begin|>1", false},
      // kimi_k3
      {"kimi_k3",
       "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"string\"<|sep|>Tokyo"
       "<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"integer\"<|sep|>3<|close|>argument<|sep|>"
       "<|close|>call<|sep|>",
       false},
      {"kimi_k3",
       "<|open|>call tool=\"f\"<|sep|><|open|>json type=\"object\"<|sep|>{\"a\": 1}<|close|>json<|sep|><|close|>call<|sep|>"
       "<|open|>call tool=\"a&amp;b&quot;\"<|sep|><|close|>call<|sep|>",
       false},
      {"kimi_k3", "<|open|>call tool=\"f\"<|sep|><|open|>json<|sep|>[1]<|close|>json<|sep|><|close|>call<|sep|>", false},
      {"kimi_k3",
       "<|open|>call<|sep|><|close|>call<|sep|><|open|>call tool=\"g\"<|sep|><|open|>argument type=\"x\"<|sep|>1"
       "<|close|>argument<|sep|><|close|>call<|sep|>",
       false},
      {"kimi_k3",
       "<|open|>call tool=\"g\"<|sep|><|open|>argument key=\"v\" type=\"number\"<|sep|>nope<|close|>argument<|sep|>"
       "<|close|>call<|sep|>",
       false},
      // minimax_m2
      {"minimax_m2",
       "\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n<parameter name=\"days\">3"
       "</parameter>\n<parameter name=\"metric\">yes</parameter><parameter name=\"temp\">21.0</parameter>"
       "<parameter name=\"opts\">{'a': 1}</parameter><parameter name=\"when\">None</parameter>"
       "<parameter name=\"level\">2</parameter><parameter name=\"tags\">[1, 2</parameter>"
       "<parameter name=\"unknown\">{\"z\": 1}</parameter>\n</invoke>\n",
       true},
      {"minimax_m2",
       "<invoke name='f'><parameter name=x>1</parameter><parameter name=\"n\">nil</parameter></invoke>"
       "<invoke name=g><parameter name=\"p\">  [1, 2]  </parameter></invoke>",
       true},
      {"minimax_m2", "no invoke", false},
      {"minimax_m2", "<invoke name=>x</invoke>", false},
      {"minimax_m2", "<invoke name=\"get_weather\"><parameter name=\"temp\">inf</parameter></invoke>", true},
      {"minimax_m2", "<invoke name=\"get_weather\"><parameter name=\"days\">1_0</parameter></invoke>", true},
      // minicpm5
      {"minicpm5", "\"get_weather\"><param name=\"city\">Paris</param><param name=\"days\">3</param>", true},
      {"minicpm5",
       "<function name=\"f\"><param name=\"x\"><![CDATA[a < b & c]]></param></function>"
       "<function name='g'><param name=n> 5 </param></function>",
       true},
      {"minicpm5", "name=f>", false},
      {"minicpm5", "name= >x", false},
      {"minicpm5", ">", false},
      {"minicpm5", "'g'><param name='x'>1</param><param name=\"y\">[1, 2]</param>\n", false},
      // longcat
      {"longcat",
       "get_weather<longcat_arg_key>city</longcat_arg_key>\n<longcat_arg_value>Paris</longcat_arg_value>"
       "<longcat_arg_key>days</longcat_arg_key><longcat_arg_value>3</longcat_arg_value>",
       true},
      {"longcat", " {\"name\": \"f\", \"arguments\": {}} ", false},
      {"longcat", "{not json<longcat_arg_key>a</longcat_arg_key><longcat_arg_value>[1]</longcat_arg_value>", false},
      {"longcat", "no key", false},
      // muse_spark
      {"muse_spark",
       "<atem:invoke name=\"get_weather\"><atem:parameter name=\"city\">\"Paris\"</atem:parameter>"
       "<atem:parameter name=\"days\">3</atem:parameter></atem:invoke>",
       false},
      {"muse_spark",
       "<atem:invoke id=\"1\" name=\"f\"><atem:parameter name=\"x\" type=\"s\"> plain text </atem:parameter>"
       "<atem:parameter name=\"y\">{\"a\": 1}</atem:parameter>",
       false},
      {"muse_spark",
       "<atem:invoke name=\"a\"></atem:invoke><atem:invoke xname=\"b\" name=\"c\"><atem:parameter name=\"p\">"
       "</atem:invoke></atem:parameter></atem:invoke>\n",
       false},
      {"muse_spark", "nothing", false},
  };
}

/** The base cases, every proper prefix of each (at code point boundaries) and every text with one
 * code point deleted. */
std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const Case& c : deep_cases()) out.push_back(c);
  for (const Case& c : base_cases()) {
    out.push_back(c);
    std::u32string t = py::to_u32(c.text);
    for (size_t n = 0; n < t.size(); ++n) out.push_back({c.parser, py::to_utf8(t.substr(0, n)), c.with_tools});
    for (size_t n = 0; n < t.size(); ++n) {
      std::u32string d = t;
      d.erase(n, 1);
      out.push_back({c.parser, py::to_utf8(d), c.with_tools});
    }
  }
  return out;
}

const char* const kParsers[] = {"json_tools", "qwen3_coder", "mistral", "gemma4",  "function_gemma",
                                "pythonic",   "glm47",       "laguna",  "kimi_k2", "kimi_k3",
                                "minimax_m2", "minicpm5",    "longcat", "muse_spark"};

struct Oracle {
  std::vector<Case> cases;
  Json expected;  // one entry per case, then one per parser's markers
};

const Oracle& oracle() {
  static Oracle o = [] {
    Oracle r;
    r.cases = all_cases();
    Json tools = Json::parse(kTools);
    Json in = Json::array();
    for (const Case& c : r.cases)
      in.push_back({{"parser", c.parser}, {"text", c.text}, {"tools", c.with_tools ? tools : Json(nullptr)}});
    for (const char* p : kParsers) in.push_back({{"parser", p}, {"markers", true}});
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("mlxrt_tool_oracle_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "in.json") << in.dump();
    std::string cmd = std::string("\"") + MLXRT_PYTHON + "\" \"" + MLXRT_SOURCE_DIR +
                      "/tests/unit/server/tool_parser_oracle.py\" \"" + (dir / "in.json").string() + "\" \"" +
                      (dir / "out.json").string() + "\" 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("the mlx-lm oracle failed: " + cmd);
    std::ifstream f(dir / "out.json");
    r.expected = Json::parse(f);
    fs::remove_all(dir);
    return r;
  }();
  return o;
}

std::string describe(const Case& c) { return std::string(c.parser) + " on " + Json(c.text).dump(); }

void check_parser(const std::string& parser) {
  const Oracle& o = oracle();
  Json tools = Json::parse(kTools);
  const tool_parsers::Format* format = tool_parsers::find_format(parser);
  ASSERT_NE(format, nullptr) << parser;
  size_t checked = 0;
  for (size_t i = 0; i < o.cases.size(); ++i) {
    const Case& c = o.cases[i];
    if (parser != c.parser) continue;
    ++checked;
    const Json& want = o.expected[i];
    std::string got;
    try {
      Json r = format->parse(py::to_u32(c.text), c.with_tools ? tools : Json(nullptr));
      got = py::is_unserializable(r) ? "unserializable" : "result " + python_dumps(r, DumpOptions{.ensure_ascii = false});
    } catch (const py::Error& e) {
      got = e.kind == py::ErrorKind::Value ? "error ValueError" : "error other";
    }
    std::string expect = want.contains("result")         ? "result " + want["result"].get<std::string>()
                         : want.contains("unserializable") ? "unserializable"
                                                           : "error " + want["error"].get<std::string>();
    EXPECT_EQ(got, expect) << describe(c);
  }
  EXPECT_GT(checked, 10u);
  // The markers the server's text state machine splits on.
  size_t m = o.cases.size() + static_cast<size_t>(std::find_if(std::begin(kParsers), std::end(kParsers),
                                                               [&](const char* p) { return parser == p; }) -
                                                  std::begin(kParsers));
  EXPECT_EQ(o.expected[m]["markers"][0], format->start) << parser;
  EXPECT_EQ(o.expected[m]["markers"][1], format->end) << parser;
}

TEST(ToolParsers, JsonTools) { check_parser("json_tools"); }
TEST(ToolParsers, Qwen3Coder) { check_parser("qwen3_coder"); }
TEST(ToolParsers, Mistral) { check_parser("mistral"); }
TEST(ToolParsers, Gemma4) { check_parser("gemma4"); }
TEST(ToolParsers, FunctionGemma) { check_parser("function_gemma"); }
TEST(ToolParsers, Pythonic) { check_parser("pythonic"); }
TEST(ToolParsers, Glm47) { check_parser("glm47"); }
TEST(ToolParsers, Laguna) { check_parser("laguna"); }
TEST(ToolParsers, KimiK2) { check_parser("kimi_k2"); }
TEST(ToolParsers, KimiK3) { check_parser("kimi_k3"); }
TEST(ToolParsers, MinimaxM2) { check_parser("minimax_m2"); }
TEST(ToolParsers, Minicpm5) { check_parser("minicpm5"); }
TEST(ToolParsers, Longcat) { check_parser("longcat"); }
TEST(ToolParsers, MuseSpark) { check_parser("muse_spark"); }

TEST(ToolParsers, EveryModuleOfMlxLmHasAFormat) {
  namespace fs = std::filesystem;
  // The modules of the pinned mlx-lm, listed by its Python.
  std::string cmd = std::string("\"") + MLXRT_PYTHON +
                    "\" -c \"import pkgutil, mlx_lm.tool_parsers as t; "
                    "print(' '.join(sorted(m.name for m in pkgutil.iter_modules(t.__path__))))\"";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string names;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe)) names += buf;
  ASSERT_EQ(pclose(pipe), 0);
  std::istringstream in(names);
  std::string name;
  size_t n = 0;
  while (in >> name) {
    EXPECT_NE(tool_parsers::find_format(name), nullptr) << name;
    EXPECT_TRUE(make_tool_parser(name).has_value()) << name;
    ++n;
  }
  EXPECT_EQ(n, std::size(kParsers));
}

}  // namespace
}  // namespace mlxrt::server
