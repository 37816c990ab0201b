//! `uwf thread answer T` at a terminal opens the person's editor on a template made from the
//! role's schema, opens it again with the reason when the answer is refused, and sends nothing
//! when the answer is left empty (run under a pseudo-terminal, with a scripted `$EDITOR`).

mod common;

use common::{Env, Need, json, start_thread};

const REVIEW: &str = "name: review\nroles:\n  writer:\n    goal: Write.\n    meta: { type: object, properties: { text: { type: string } }, required: [text] }\n  approver:\n    goal: Approve or not.\n    meta: { type: object, properties: { approved: { type: boolean, description: Whether it ships. }, comments: { type: string } }, required: [approved] }\ngraph:\n  $START: [ { role: writer, condition: null } ]\n  writer: [ { role: approver, condition: null } ]\n  approver: [ { role: $END, condition: null } ]\n";

/// A thread of `REVIEW` waiting for the approver's answer.
fn asking(env: &Env) -> String {
    env.ok_stdin(&["workflow", "put", "-"], REVIEW);
    let id = start_thread(env, "review", "Release notes for 2.0");
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
    env.ok(&["thread", "step", &id, "--agent", "human"]);
    id
}

#[test]
fn a_person_answers_in_their_editor_and_a_refusal_reopens_it_with_why() {
    if !common::has(
        "a_person_answers_in_their_editor_and_a_refusal_reopens_it_with_why",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    let id = asking(&env);
    let seen = env.dir.path().join("seen");
    // First time: keep a copy of the template and answer wrongly; second: answer rightly.
    let editor = common::script(
        &env,
        "editor.sh",
        &format!(
            "n=$(ls {seen}* 2>/dev/null | wc -l)\ncp \"$1\" {seen}$n\n\
             if [ $n = 0 ]; then sed -i 's/^approved: false$/approved: yes/' \"$1\"; \
             else sed -i 's/^approved: yes$/approved: true/' \"$1\"; fi
             [ $n -lt 3 ] || : > \"$1\"",
            seen = seen.display()
        ),
    );
    let shown = common::on_terminal(
        &env,
        &["thread", "answer", &id],
        &[("EDITOR", editor.to_str().unwrap()), ("NO_COLOR", "1")],
    );
    let first = std::fs::read_to_string(env.dir.path().join("seen0")).expect("the template");
    assert!(
        first.starts_with(&format!("# Answer thread {id} as `approver`.")),
        "{first}"
    );
    assert!(first.contains("# Release notes for 2.0\n"), "{first}");
    assert!(
        first
            .contains("# approved (true or false, required): Whether it ships.\napproved: false\n"),
        "{first}"
    );
    assert!(
        first.contains("# comments: ''\n"),
        "optional fields are commented out: {first}"
    );
    let second = std::fs::read_to_string(env.dir.path().join("seen1")).expect("reopened");
    assert!(second.starts_with("# The answer was refused:"), "{second}");
    assert!(second.contains("boolean"), "the reason: {second}");
    assert!(
        second.contains("approved: yes"),
        "the text as it was: {second}"
    );
    assert!(shown.contains("refused"), "{shown}");
    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["status"], "done", "{show}\n{shown}");
    let steps = env.ok(&["thread", "steps", &id]);
    assert!(steps.contains("\"approved\":true"), "{steps}");
}

#[test]
fn an_answer_left_empty_sends_nothing() {
    if !common::has(
        "an_answer_left_empty_sends_nothing",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    let id = asking(&env);
    let editor = common::script(&env, "empty.sh", ": > \"$1\"");
    let shown = common::on_terminal(
        &env,
        &["thread", "answer", &id],
        &[("EDITOR", editor.to_str().unwrap()), ("NO_COLOR", "1")],
    );
    assert!(shown.contains("nothing was sent"), "{shown}");
    let show = json(&env.ok(&["thread", "show", &id]));
    assert_eq!(show["status"], "awaiting", "{show}");
}

/// The template lists the fields in the order the workflow's author wrote them, not sorted:
/// here `verdict` before `approved` before `notes`, each after its description as a comment.
#[test]
fn the_template_keeps_the_authors_field_order_with_descriptions_as_comments() {
    if !common::has(
        "the_template_keeps_the_authors_field_order_with_descriptions_as_comments",
        &[Need::Tool("script")],
    ) {
        return;
    }
    let env = Env::new();
    let workflow = REVIEW.replace(
        "properties: { approved: { type: boolean, description: Whether it ships. }, comments: { type: string } }, required: [approved]",
        "properties: { verdict: { type: string, description: One line for the changelog. }, approved: { type: boolean, description: Whether it ships. }, notes: { type: string } }, required: [verdict, approved]",
    );
    assert_ne!(workflow, REVIEW);
    env.ok_stdin(&["workflow", "put", "-"], &workflow);
    let id = start_thread(&env, "review", "Release notes for 2.1");
    env.ok(&["thread", "step", &id, "--agent", "dry"]);
    env.ok(&["thread", "step", &id, "--agent", "human"]);
    let seen = env.dir.path().join("template");
    let editor = common::script(
        &env,
        "keep.sh",
        &format!("cp \"$1\" {}\n: > \"$1\"", seen.display()),
    );
    let shown = common::on_terminal(
        &env,
        &["thread", "answer", &id],
        &[("EDITOR", editor.to_str().unwrap()), ("NO_COLOR", "1")],
    );
    let template = std::fs::read_to_string(&seen).expect("the editor was opened");
    let at = |text: &str| {
        template
            .find(text)
            .unwrap_or_else(|| panic!("`{text}` missing: {template}\n{shown}"))
    };
    let verdict = at("# verdict (string, required): One line for the changelog.\nverdict: ");
    let approved = at("# approved (true or false, required): Whether it ships.\napproved: false\n");
    let notes = at("# notes: ''");
    assert!(verdict < approved && approved < notes, "{template}");
    assert!(shown.contains("nothing was sent"), "{shown}");
}
