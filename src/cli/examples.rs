//! The examples at the end of every command's `--help`: one table, laid over the grammar of
//! `args.rs` when the command line is built, so that each command has them and a test checks
//! that every one still parses.
//!
//! Invariant: every subcommand (but clap's own `help`) has an entry; the entries name the
//! default catalog's jobs, processors and objects (`device_stats`, `main`, `stat`).

use clap::CommandFactory as _;

use super::args::Cli;

/// `(command path, examples)`: each example a line `jobvisor …` and an optional `# why`.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "run",
        "jobvisor run                               # the node on ./jobvisor-data/jobvisor.db
jobvisor run --node n1 --bind 127.0.0.1:0  # another node on the same catalog, any free port",
    ),
    (
        "init",
        "jobvisor init                              # create and seed ./jobvisor-data/jobvisor.db
jobvisor --db /srv/jobs.db init",
    ),
    (
        "check",
        "jobvisor check job.conf                    # every error as file:line:col
jobvisor check --format millix --strict job.json",
    ),
    (
        "import",
        "jobvisor import job.conf                   # upsert by name; lists each change
jobvisor import --format millix job.json",
    ),
    (
        "export",
        "jobvisor export > job.conf
jobvisor export -o job.conf                # written atomically",
    ),
    (
        "config",
        "jobvisor config                            # the effective configuration
jobvisor config --print-defaults           # every key with its unit and default",
    ),
    (
        "jobs",
        "jobvisor jobs list
jobvisor jobs show device_stats",
    ),
    (
        "jobs list",
        "jobvisor jobs list
jobvisor --node n1 --json jobs list        # as node n1 sees them, as JSON",
    ),
    (
        "jobs show",
        "jobvisor jobs show device_stats           # job.conf, activation and last run",
    ),
    (
        "jobs add",
        "jobvisor jobs add nightly --type command --processor maintenance \\
    --payload '{\"argv\": [\"/usr/local/bin/report\"]}' --run-at 02:00 --timeout 600000
jobvisor jobs add ping --type url --processor main --run-every 5 \\
    --payload '{\"url\": \"https://example.com/health\"}'",
    ),
    (
        "jobs edit",
        "jobvisor jobs edit device_stats --priority 60 --run-every 2
jobvisor jobs edit device_stats --stretch-max 4   # may run 4x less often under strain",
    ),
    ("jobs enable", "jobvisor jobs enable device_stats"),
    ("jobs disable", "jobvisor jobs disable device_stats"),
    ("jobs remove", "jobvisor jobs remove nightly"),
    (
        "jobs run",
        "jobvisor jobs run device_stats
jobvisor jobs run nightly --params '{\"day\": \"2026-11-30\"}'   # JOBVISOR_PARAMS of a command job",
    ),
    (
        "jobs pin",
        "jobvisor jobs pin device_stats active      # run it whatever the node's health
jobvisor jobs pin device_stats none        # the policy decides again",
    ),
    (
        "jobs next",
        "jobvisor jobs next device_stats --count 10",
    ),
    (
        "processors",
        "jobvisor processors list
jobvisor processors add io --instances 2 --max-instances 4",
    ),
    ("processors list", "jobvisor processors list"),
    (
        "processors add",
        "jobvisor processors add io --instances 2 --max-instances 4
jobvisor processors add nodeb --ip-address 10.0.0.2 --port 7878 --rpc-password env:NODEB_TOKEN",
    ),
    (
        "processors edit",
        "jobvisor processors edit main --instances 2
jobvisor processors edit io --nodes gpu-box   # only node gpu-box runs it (\"\" for any)",
    ),
    ("processors remove", "jobvisor processors remove io"),
    (
        "objects",
        "jobvisor objects list
jobvisor objects add events --conn-string events.db",
    ),
    ("objects list", "jobvisor objects list"),
    (
        "objects add",
        "jobvisor objects add events --conn-string events.db   # in the data folder
jobvisor objects add logs --conn-string logs.db --time-to-live 86400 --allow-prune true",
    ),
    (
        "objects edit",
        "jobvisor objects edit events --time-to-live 604800",
    ),
    ("objects remove", "jobvisor objects remove events"),
    (
        "runs",
        "jobvisor runs list --status failed --since 2h
jobvisor runs show 42",
    ),
    (
        "runs list",
        "jobvisor runs list --job device_stats --status failed --since 2h
jobvisor runs list --before 1000 --limit 100    # the page after run 1000",
    ),
    ("runs show", "jobvisor runs show 42"),
    ("runs tree", "jobvisor runs tree 42"),
    ("runs cancel", "jobvisor runs cancel 42"),
    ("runs retry", "jobvisor runs retry 42"),
    ("nodes", "jobvisor nodes list"),
    ("nodes list", "jobvisor nodes list"),
    (
        "users",
        "jobvisor users list
jobvisor users add ops --role operator",
    ),
    ("users list", "jobvisor users list"),
    (
        "users add",
        "jobvisor users add ops --role operator     # prints a generated password once
printf '%s\\n' \"$PASSWORD\" | jobvisor users add ops --role operator --password-stdin",
    ),
    (
        "users passwd",
        "printf '%s\\n' \"$PASSWORD\" | jobvisor users passwd admin   # the admin of a first start",
    ),
    ("users remove", "jobvisor users remove ops"),
    (
        "tokens",
        "jobvisor tokens list
jobvisor tokens create ops",
    ),
    ("tokens list", "jobvisor tokens list"),
    (
        "tokens create",
        "jobvisor tokens create ops --name ci       # printed once",
    ),
    ("tokens revoke", "jobvisor tokens revoke 3"),
    (
        "pause",
        "jobvisor pause processor main --fleet --reason \"db upgrade\"  # every node
jobvisor --node n1 pause job device_stats  # on node n1 only",
    ),
    (
        "resume",
        "jobvisor resume processor main --fleet
jobvisor --node n1 resume job device_stats",
    ),
    (
        "pauses",
        "jobvisor pauses                            # scope, name, node, who, when, why
jobvisor --json pauses",
    ),
    (
        "decisions",
        "jobvisor decisions --limit 20
jobvisor decisions --all-nodes",
    ),
    (
        "stats",
        "jobvisor stats                             # the latest value of every series
jobvisor stats device.cpu_used --since 10m",
    ),
];

/// The command line's grammar with each command's examples after its help.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    for (path, examples) in EXAMPLES {
        let text = format!("Examples:\n{}", indent(examples));
        cmd = with_examples(cmd, &path.split(' ').collect::<Vec<_>>(), text);
    }
    cmd
}

fn with_examples(cmd: clap::Command, path: &[&str], text: String) -> clap::Command {
    match path {
        [] => cmd.after_help(text),
        [first, rest @ ..] => {
            let rest = rest.to_vec();
            cmd.mut_subcommand(*first, move |sub| with_examples(sub, &rest, text))
        }
    }
}

fn indent(examples: &str) -> String {
    examples
        .lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand's path, `help` left out (clap's own).
    fn paths(cmd: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let mut path = prefix.to_vec();
            path.push(sub.get_name().to_string());
            out.push(path.clone());
            paths(sub, &path, out);
        }
    }

    /// Splits an example line as a POSIX shell would: words, single and double quotes,
    /// `\"` in double quotes; a `#` comment, a pipe's left side and a redirect are dropped.
    fn words(line: &str) -> Vec<String> {
        let line = line.rsplit_once(" | ").map_or(line, |(_, right)| right);
        let (mut out, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (quote, c) {
                (None, '#') if word.is_empty() => break,
                (None, '>') => break,
                (None, ' ') => {
                    if any {
                        out.push(std::mem::take(&mut word));
                        any = false;
                    }
                }
                (None, '\'' | '"') => {
                    quote = Some(c);
                    any = true;
                }
                (Some(q), c) if c == q => quote = None,
                (Some('"'), '\\') if chars.peek() == Some(&'"') => {
                    word.push(chars.next().unwrap_or('"'));
                }
                _ => {
                    word.push(c);
                    any = true;
                }
            }
        }
        if any {
            out.push(word);
        }
        out
    }

    /// The examples of one entry as argument lists, continuation lines joined.
    fn example_commands(examples: &str) -> Vec<Vec<String>> {
        examples
            .replace("\\\n", " ")
            .lines()
            .map(words)
            .filter(|w| !w.is_empty())
            .collect()
    }

    /// Issue 27, point 16: no `--help` had an example. Every subcommand's help now ends with
    /// some, and each parses with this grammar (a renamed flag breaks this test, not a
    /// reader).
    #[test]
    fn regression_every_subcommands_help_has_examples_that_parse() {
        let cmd = command();
        let mut all = Vec::new();
        paths(&cmd, &[], &mut all);
        assert!(all.len() > 40, "{all:?}");
        let mut missing = Vec::new();
        for path in &all {
            let mut sub = &cmd;
            for name in path {
                sub = sub.find_subcommand(name).unwrap();
            }
            let help = sub.clone().render_help().to_string();
            if !help.contains("Examples:\n  jobvisor ") && !help.contains("Examples:\n  printf ") {
                missing.push(path.join(" "));
            }
        }
        assert!(
            missing.is_empty(),
            "no examples in the help of: {missing:?}"
        );
        for (path, examples) in EXAMPLES {
            let commands = example_commands(examples);
            assert!(!commands.is_empty(), "{path}");
            for words in commands {
                assert_eq!(words[0], "jobvisor", "{path}: {words:?}");
                let parsed = command().try_get_matches_from(&words);
                let matches = match parsed {
                    Ok(m) => m,
                    Err(e) => panic!("{path}: {words:?}: {e}"),
                };
                // Each example belongs to its entry's command.
                let mut named: Vec<&str> = Vec::new();
                let mut at = &matches;
                while let Some((name, sub)) = at.subcommand() {
                    named.push(name);
                    at = sub;
                }
                let expected: Vec<&str> = path.split(' ').collect();
                assert_eq!(
                    &named[..expected.len().min(named.len())],
                    &expected[..],
                    "{path}: {words:?}"
                );
            }
        }
    }

    #[test]
    fn words_split_as_a_shell_does() {
        assert_eq!(
            words(r#"jobvisor jobs run x --params '{"a": 1}'   # why"#),
            ["jobvisor", "jobs", "run", "x", "--params", r#"{"a": 1}"#]
        );
        assert_eq!(
            words(r#"printf '%s\n' "$P" | jobvisor users passwd admin"#),
            ["jobvisor", "users", "passwd", "admin"]
        );
        assert_eq!(words("jobvisor export > my.conf"), ["jobvisor", "export"]);
        assert_eq!(
            words(r#"jobvisor x --nodes """#),
            ["jobvisor", "x", "--nodes", ""]
        );
    }
}
