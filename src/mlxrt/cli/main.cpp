// mlxrt: the command-line front end. Each verb lives in its own file (verbs.h); errors raised
// inside the runtime are caught here and shown as one line on stderr with a non-zero exit.
#include <CLI/CLI.hpp>

#include <iostream>

#include "mlxrt/cli/verbs.h"
#include "mlxrt/util/errors.h"

int main(int argc, char** argv) {
  CLI::App app{"mlxrt: a native runtime for MLX language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("mlxrt 0.1.0"));
  mlxrt::cli::register_verbs(app);
  // argparse (mlx-lm's command lines) takes the last of a repeated option; CLI11 refuses a repeated
  // single-value option unless told to do the same. Options taking several values are left alone.
  for (CLI::App* verb : app.get_subcommands([](CLI::App*) { return true; }))
    for (CLI::Option* option : verb->get_options())
      if (option->get_items_expected_max() == 1 && option->get_type_size() != 0)
        option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mlxrt::Error& e) {
    std::cout.flush();
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
