//! Workflow payloads: the steps of a `workflow` job — each a catalog job with parameters — the
//! steps each waits for (`after`), and the predecessors whose results it takes as input
//! (`inputs`).
//!
//! ```toml
//! [job.mail]
//! type = "workflow"
//! processor = "default"
//! payload.steps = [
//!     { name = "store", job = "mail.store" },
//!     { name = "split", job = "mail.split", after = ["store"], inputs = ["store"] },
//! ]
//! ```
//!
//! Invariant: pure (no database, no clock); [`WorkflowSpec::parse`] is the one reading of a
//! workflow payload, shared by validation (`check`, `import`, `jobs add|edit`) and by the
//! catalog, which queues each step when its last predecessor succeeds.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{Map as JsonMap, Value as Json};

/// One step of a workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Unique within the workflow; the job's name when the step names none.
    pub name: String,
    /// The catalog job it runs.
    pub job: String,
    /// The steps that must have succeeded before it is queued.
    pub after: Vec<String>,
    /// Predecessors whose results it gets, as `params.inputs.<step>`.
    pub inputs: Vec<String>,
    /// Its parameters, over the workflow run's own (and under `inputs`).
    pub params: JsonMap<String, Json>,
}

/// A workflow job's steps, in the order the payload lists them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkflowSpec {
    /// The steps.
    pub steps: Vec<Step>,
}

/// A problem in a workflow payload, located by its path inside the payload
/// (`steps[2].after`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepProblem {
    /// Where, inside the payload.
    pub at: String,
    /// What is wrong.
    pub reason: String,
}

impl StepProblem {
    fn new(at: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            at: at.into(),
            reason: reason.into(),
        }
    }
}

/// The keys a step may have.
const STEP_KEYS: [&str; 5] = ["name", "job", "after", "inputs", "params"];

impl WorkflowSpec {
    /// Reads a workflow payload: every step has a job; names are unique; `after` and `inputs`
    /// name steps of the workflow (`inputs` only predecessors); the steps form no cycle.
    /// Whether the jobs exist is the catalog's question (`jobconf::validate`).
    pub fn parse(payload: &JsonMap<String, Json>) -> Result<Self, Vec<StepProblem>> {
        let mut problems = Vec::new();
        for key in payload.keys().filter(|k| *k != "steps") {
            problems.push(StepProblem::new(
                key.clone(),
                format!("unknown field `{key}`: a workflow's payload has only `steps`"),
            ));
        }
        let steps = match payload.get("steps") {
            Some(Json::Array(steps)) if !steps.is_empty() => steps,
            Some(Json::Array(_)) => {
                problems.push(StepProblem::new(
                    "steps",
                    "a workflow needs at least one step",
                ));
                return Err(problems);
            }
            Some(other) => {
                problems.push(StepProblem::new(
                    "steps",
                    format!("expected a list of steps ({{ name, job, after, inputs, params }}), got {other}"),
                ));
                return Err(problems);
            }
            None => {
                problems.push(StepProblem::new(
                    "steps",
                    "a workflow job needs payload.steps, a list of { name, job, after, inputs, params }",
                ));
                return Err(problems);
            }
        };
        let mut spec = WorkflowSpec::default();
        let mut at_of: BTreeMap<String, usize> = BTreeMap::new();
        for (i, raw) in steps.iter().enumerate() {
            let at = |field: &str| format!("steps[{i}].{field}");
            let Json::Object(map) = raw else {
                problems.push(StepProblem::new(
                    format!("steps[{i}]"),
                    format!("expected a step {{ name, job, after, inputs, params }}, got {raw}"),
                ));
                continue;
            };
            for key in map.keys().filter(|k| !STEP_KEYS.contains(&k.as_str())) {
                problems.push(StepProblem::new(
                    at(key),
                    format!(
                        "unknown field `{key}` (a step has {})",
                        STEP_KEYS.join(", ")
                    ),
                ));
            }
            let job = match map.get("job") {
                Some(Json::String(job)) if !job.trim().is_empty() => job.clone(),
                Some(other) => {
                    problems.push(StepProblem::new(
                        at("job"),
                        format!("expected a job name, got {other}"),
                    ));
                    continue;
                }
                None => {
                    problems.push(StepProblem::new(
                        format!("steps[{i}]"),
                        "every step needs `job`, the name of a catalog job",
                    ));
                    continue;
                }
            };
            let name = match map.get("name") {
                None => job.clone(),
                Some(Json::String(name)) => match super::check_name(name) {
                    Ok(()) => name.clone(),
                    Err(reason) => {
                        problems.push(StepProblem::new(at("name"), reason));
                        continue;
                    }
                },
                Some(other) => {
                    problems.push(StepProblem::new(
                        at("name"),
                        format!("expected a step name, got {other}"),
                    ));
                    continue;
                }
            };
            let mut list = |field: &str| -> Vec<String> {
                match map.get(field) {
                    None => Vec::new(),
                    Some(Json::Array(items)) if items.iter().all(Json::is_string) => items
                        .iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect(),
                    Some(other) => {
                        problems.push(StepProblem::new(
                            at(field),
                            format!("expected a list of step names, got {other}"),
                        ));
                        Vec::new()
                    }
                }
            };
            let (after, inputs) = (list("after"), list("inputs"));
            let params = match map.get("params") {
                None => JsonMap::new(),
                Some(Json::Object(params)) => params.clone(),
                Some(other) => {
                    problems.push(StepProblem::new(
                        at("params"),
                        format!("expected a table of parameters, got {other}"),
                    ));
                    JsonMap::new()
                }
            };
            if let Some(first) = at_of.insert(name.clone(), i) {
                problems.push(StepProblem::new(
                    if map.contains_key("name") {
                        at("name")
                    } else {
                        at("job")
                    },
                    format!(
                        "step `{name}` is also steps[{first}]: step names must be unique (give \
                         one a `name`)"
                    ),
                ));
                continue;
            }
            spec.steps.push(Step {
                name,
                job,
                after,
                inputs,
                params,
            });
        }
        for step in &spec.steps {
            let i = at_of[&step.name];
            let mut seen = BTreeSet::new();
            for dep in &step.after {
                if dep == &step.name {
                    problems.push(StepProblem::new(
                        format!("steps[{i}].after"),
                        format!("step `{dep}` cannot wait for itself"),
                    ));
                } else if !at_of.contains_key(dep) {
                    problems.push(StepProblem::new(
                        format!("steps[{i}].after"),
                        format!(
                            "step `{}` waits for `{dep}`, which is not a step of this workflow \
                             (steps: {})",
                            step.name,
                            spec.names().join(", ")
                        ),
                    ));
                } else if !seen.insert(dep) {
                    problems.push(StepProblem::new(
                        format!("steps[{i}].after"),
                        format!("`{dep}` is listed twice"),
                    ));
                }
            }
            for input in &step.inputs {
                if !step.after.contains(input) {
                    problems.push(StepProblem::new(
                        format!("steps[{i}].inputs"),
                        format!(
                            "step `{}` takes the result of `{input}`, which is not one of its \
                             predecessors (after = [{}])",
                            step.name,
                            step.after.join(", ")
                        ),
                    ));
                }
            }
        }
        if problems.is_empty()
            && let Some(cycle) = spec.cycle()
        {
            let i = at_of[&cycle[0]];
            problems.push(StepProblem::new(
                format!("steps[{i}].after"),
                format!(
                    "the steps wait for each other in a cycle: {}",
                    cycle.join(" → ")
                ),
            ));
        }
        if problems.is_empty() {
            Ok(spec)
        } else {
            Err(problems)
        }
    }

    /// The step called `name`.
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// Every step's name, in order.
    pub fn names(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.name.as_str()).collect()
    }

    /// The steps that wait for nothing: queued when the workflow starts.
    pub fn roots(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().filter(|s| s.after.is_empty())
    }

    /// The steps that wait for `name` directly.
    pub fn dependents<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Step> + 'a {
        self.steps
            .iter()
            .filter(move |s| s.after.iter().any(|a| a == name))
    }

    /// Every step that waits for `name`, directly or through others, in workflow order.
    pub fn downstream(&self, name: &str) -> Vec<&Step> {
        let mut reached: BTreeSet<&str> = BTreeSet::new();
        let mut todo: VecDeque<&str> = VecDeque::from([name]);
        while let Some(next) = todo.pop_front() {
            for dep in self.dependents(next) {
                if reached.insert(&dep.name) {
                    todo.push_back(&dep.name);
                }
            }
        }
        self.steps
            .iter()
            .filter(|s| reached.contains(s.name.as_str()))
            .collect()
    }

    /// A cycle of steps (each waiting for the next, the first repeated at the end), if any.
    fn cycle(&self) -> Option<Vec<String>> {
        // Depth-first, three colours: a step met again while on the path closes a cycle.
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            OnPath,
            Done,
        }
        let index: BTreeMap<&str, usize> = self
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let mut marks = vec![Mark::New; self.steps.len()];
        let mut path: Vec<usize> = Vec::new();
        fn visit(
            spec: &WorkflowSpec,
            index: &BTreeMap<&str, usize>,
            marks: &mut [Mark],
            path: &mut Vec<usize>,
            at: usize,
        ) -> Option<Vec<String>> {
            marks[at] = Mark::OnPath;
            path.push(at);
            for dep in &spec.steps[at].after {
                let Some(&next) = index.get(dep.as_str()) else {
                    continue;
                };
                match marks[next] {
                    Mark::OnPath => {
                        let from = path.iter().position(|&p| p == next).unwrap_or(0);
                        let mut cycle: Vec<String> = path[from..]
                            .iter()
                            .map(|&p| spec.steps[p].name.clone())
                            .collect();
                        cycle.push(spec.steps[next].name.clone());
                        return Some(cycle);
                    }
                    Mark::New => {
                        if let Some(c) = visit(spec, index, marks, path, next) {
                            return Some(c);
                        }
                    }
                    Mark::Done => {}
                }
            }
            path.pop();
            marks[at] = Mark::Done;
            None
        }
        for start in 0..self.steps.len() {
            if marks[start] == Mark::New
                && let Some(c) = visit(self, &index, &mut marks, &mut path, start)
            {
                return Some(c);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Json) -> Result<WorkflowSpec, Vec<StepProblem>> {
        WorkflowSpec::parse(v.as_object().unwrap())
    }

    #[test]
    fn a_diamond_parses_with_its_roots_dependents_and_downstream() {
        let spec = parse(json!({ "steps": [
            { "job": "a" },
            { "name": "b", "job": "x", "after": ["a"], "inputs": ["a"] },
            { "name": "c", "job": "x", "after": ["a"], "params": { "k": 1 } },
            { "name": "d", "job": "y", "after": ["b", "c"] },
        ]}))
        .unwrap();
        assert_eq!(spec.names(), ["a", "b", "c", "d"]);
        assert_eq!(spec.roots().map(|s| &s.name[..]).collect::<Vec<_>>(), ["a"]);
        let deps: Vec<&str> = spec.dependents("a").map(|s| &s.name[..]).collect();
        assert_eq!(deps, ["b", "c"]);
        let down: Vec<&str> = spec.downstream("b").iter().map(|s| &s.name[..]).collect();
        assert_eq!(down, ["d"]);
        assert_eq!(spec.step("c").unwrap().params["k"], 1);
    }

    #[test]
    fn a_cycle_is_refused_naming_its_steps() {
        let err = parse(json!({ "steps": [
            { "job": "a", "after": ["c"] },
            { "job": "b", "after": ["a"] },
            { "job": "c", "after": ["b"] },
        ]}))
        .unwrap_err();
        assert_eq!(err.len(), 1, "{err:?}");
        assert_eq!(err[0].at, "steps[0].after");
        assert!(err[0].reason.contains("a → c → b → a"), "{}", err[0].reason);
    }

    #[test]
    fn unknown_names_duplicates_and_foreign_inputs_are_located() {
        let err = parse(json!({ "steps": [
            { "job": "a" },
            { "job": "a" },
            { "name": "b", "job": "x", "after": ["nope"], "inputs": ["a"] },
            { "name": "c", "jobs": "x" },
        ], "extra": 1 }))
        .unwrap_err();
        let at: Vec<&str> = err.iter().map(|p| p.at.as_str()).collect();
        assert_eq!(
            at,
            [
                "extra",
                "steps[1].job",
                "steps[3].jobs",
                "steps[3]",
                "steps[2].after",
                "steps[2].inputs"
            ],
            "{err:?}"
        );
        assert!(err[4].reason.contains("`nope`, which is not a step"));
    }
}
