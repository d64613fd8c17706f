/* report_junit.c — JUnit XML (libxml2 xmlTextWriter, which does the escaping): one <testsuite>
 * per case report, one <testcase> per configuration with time = its engine run's wall seconds;
 * a failing configuration has a <failure> whose type and message name the real cause
 * (hx_config_report_failure); every run configuration carries its class, worst err/E and golden
 * status in <system-out>. */
#include "model/report.h"
#include "kvd_version.h"

#include "fs.h"

#include <libxml/xmlwriter.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define X(s) ((const xmlChar *)(s))

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when it is not valid. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3
                                                     : (s[0] >> 3) == 30 ? 4 : 0;
    for (size_t i = 1; i < n; ++i)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* XML 1.0 cannot carry most control characters even escaped (&#1; does not parse), and the
 * writer does not check UTF-8: replace both kinds of bad bytes with '?' before handing text
 * to the writer, which escapes <, >, &, quotes. */
static const xmlChar *clean(const char *s)
{
    static char buf[2048];
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    while (*p && o + 5 < sizeof buf) {
        size_t n = utf8_len(p);
        if (n == 0 || (n == 1 && ((*p < 0x20 && *p != '\t' && *p != '\n') || *p == 0x7f))) {
            buf[o++] = '?';
            ++p;
            continue;
        }
        for (size_t i = 0; i < n; ++i)
            buf[o++] = (char)p[i];
        p += n;
    }
    buf[o] = '\0';
    return X(buf);
}

static int attr(xmlTextWriterPtr w, const char *name, const char *value)
{
    return xmlTextWriterWriteAttribute(w, X(name), clean(value));
}

/* <property name="prompt_ids" value="1,403,..."/>: every prompt token id (digits and commas
 * need no cleaning, and the list may be longer than clean()'s buffer). */
static int ids_property(xmlTextWriterPtr w, const hx_report *r)
{
    const uint32_t n = r->prompt_ids ? r->n_prompt : 0;
    char *ids = malloc((size_t)n * 12 + 1);
    if (ids == NULL)
        return -1;
    size_t k = 0;
    ids[0] = '\0';
    for (uint32_t i = 0; i < n; ++i)
        k += (size_t)snprintf(ids + k, 13, "%s%d", i ? "," : "", (int)r->prompt_ids[i]);
    int bad = xmlTextWriterStartElement(w, X("property")) < 0;
    bad |= xmlTextWriterWriteAttribute(w, X("name"), X("prompt_ids")) < 0;
    bad |= xmlTextWriterWriteAttribute(w, X("value"), X(ids)) < 0;
    bad |= xmlTextWriterEndElement(w) < 0;
    free(ids);
    return bad ? -1 : 0;
}

/* <testsuite name tests failures errors skipped time timestamp>, left open. */
static int suite_start(xmlTextWriterPtr w, const hx_report *r, bool strict)
{
    int fails = 0, skips = 0;
    double time_s = 0.0;
    for (size_t i = 0; i < r->n_configs; ++i) {
        fails += hx_config_report_fails(&r->configs[i], strict);
        skips += r->configs[i].skipped;
        time_s += r->configs[i].wall_s;
    }
    int bad = xmlTextWriterStartElement(w, X("testsuite")) < 0;
    bad |= attr(w, "name", r->case_name) < 0;
    bad |= xmlTextWriterWriteFormatAttribute(w, X("tests"), "%zu", r->n_configs) < 0;
    bad |= xmlTextWriterWriteFormatAttribute(w, X("failures"), "%d", fails) < 0;
    bad |= attr(w, "errors", "0") < 0;
    bad |= xmlTextWriterWriteFormatAttribute(w, X("skipped"), "%d", skips) < 0;
    bad |= xmlTextWriterWriteFormatAttribute(w, X("time"), "%.6f", time_s) < 0;
    bad |= attr(w, "timestamp", r->created_utc) < 0;
    return bad;
}

/* <properties>: the report's provenance (model, hashes, platform, version, command line,
 * phase seconds), then prompt_ids. */
static int properties(xmlTextWriterPtr w, const hx_report *r)
{
    int bad = xmlTextWriterStartElement(w, X("properties")) < 0;
    char phases[256] = "";
    for (int i = 0; i < HX_N_PHASES; ++i) {
        const size_t k = strlen(phases);
        snprintf(phases + k, sizeof phases - k, "%s%s=%.3f", i ? " " : "",
                 hx_phase_name((hx_phase)i), r->phase_s[i]);
    }
    const char *props[][2] = {{"model", r->model},
                              {"model_hash", r->model_hash},
                              {"tokens_hash", r->tokens_hash},
                              {"platform", r->fingerprint},
                              {"platform_id", r->fingerprint_id},
                              {"kvdrift_version", KVD_VERSION},
                              {"kvdrift_commit", lm_git_commit()},
                              {"command_line", r->command_line},
                              {"phase_s", phases}};
    for (size_t i = 0; i < sizeof props / sizeof props[0]; ++i) {
        bad |= xmlTextWriterStartElement(w, X("property")) < 0;
        bad |= attr(w, "name", props[i][0]) < 0;
        bad |= attr(w, "value", props[i][1]) < 0;
        bad |= xmlTextWriterEndElement(w) < 0;
    }
    bad |= ids_property(w, r) < 0;
    bad |= xmlTextWriterEndElement(w) < 0;
    return bad;
}

/* The <testcase> of configuration c: <skipped> when it did not run, else a <failure> when it
 * fails and its <system-out>. */
static int testcase(xmlTextWriterPtr w, const hx_report *r, const hx_config_report *c,
                    const char *classname, bool strict)
{
    int bad = xmlTextWriterStartElement(w, X("testcase")) < 0;
    bad |= attr(w, "classname", classname) < 0;
    bad |= attr(w, "name", c->config) < 0;
    bad |= xmlTextWriterWriteFormatAttribute(w, X("time"), "%.6f", c->wall_s) < 0;
    if (c->skipped) {
        /* A case that could not run (model file absent): CI shows it as skipped. */
        bad |= xmlTextWriterStartElement(w, X("skipped")) < 0;
        bad |= attr(w, "message", r->skipped) < 0;
        bad |= xmlTextWriterEndElement(w) < 0;
        bad |= xmlTextWriterEndElement(w) < 0;
        return bad;
    }
    if (hx_config_report_fails(c, strict)) {
        const char *type;
        char msg[1100];
        hx_config_report_failure(msg, sizeof msg, &type, c, strict);
        bad |= xmlTextWriterStartElement(w, X("failure")) < 0;
        bad |= xmlTextWriterWriteAttribute(w, X("type"), X(type)) < 0;
        bad |= attr(w, "message", msg) < 0;
        bad |= xmlTextWriterWriteString(w, clean(msg)) < 0;
        bad |= xmlTextWriterEndElement(w) < 0;
    }
    char summary[1024], out[1400];
    hx_config_report_summary(summary, sizeof summary, c);
    snprintf(out, sizeof out, "class %s; worst err/E %.3g; golden %s%s%s\n%s\n",
             hx_class_name(c->cls), c->worst_ratio, hx_golden_status_name(c->golden),
             c->golden_note[0] ? ": " : "", c->golden_note, summary);
    bad |= xmlTextWriterWriteElement(w, X("system-out"), clean(out)) < 0;
    bad |= xmlTextWriterEndElement(w) < 0;
    return bad;
}

static int suite(xmlTextWriterPtr w, const hx_report *r, bool strict)
{
    strict = strict || r->strict_bits; /* a case's own strict_bits policy holds too */
    int bad = suite_start(w, r, strict);
    bad |= properties(w, r);
    char classname[160];
    snprintf(classname, sizeof classname, "kvdrift.%s", r->case_name);
    for (size_t i = 0; i < r->n_configs && !bad; ++i)
        bad |= testcase(w, r, &r->configs[i], classname, strict);
    bad |= xmlTextWriterEndElement(w) < 0;
    return bad;
}

int hx_report_junit_text(char **out, size_t *len, const hx_report *const *rs, size_t n,
                         bool strict, lm_err *err)
{
    xmlBufferPtr buf = xmlBufferCreate();
    xmlTextWriterPtr w = buf ? xmlNewTextWriterMemory(buf, 0) : NULL;
    if (w == NULL) {
        xmlBufferFree(buf);
        return LM_FAIL(err, LM_E_NOMEM, "cannot create the XML writer");
    }
    int total = 0, fails = 0;
    for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < rs[i]->n_configs; ++j) {
            total++;
            fails += hx_config_report_fails(&rs[i]->configs[j], strict || rs[i]->strict_bits);
        }
    xmlTextWriterSetIndent(w, 1);
    int bad = xmlTextWriterStartDocument(w, NULL, "UTF-8", NULL) < 0;
    bad |= xmlTextWriterStartElement(w, X("testsuites")) < 0;
    bad |= attr(w, "name", "kvdrift") < 0;
    bad |= xmlTextWriterWriteFormatAttribute(w, X("tests"), "%d", total) < 0;
    bad |= xmlTextWriterWriteFormatAttribute(w, X("failures"), "%d", fails) < 0;
    for (size_t i = 0; i < n && !bad; ++i)
        bad |= suite(w, rs[i], strict);
    bad |= xmlTextWriterEndDocument(w) < 0;
    xmlFreeTextWriter(w); /* flushes into buf */
    const size_t n_bytes = bad ? 0 : (size_t)xmlBufferLength(buf);
    *out = bad ? NULL : malloc(n_bytes + 1);
    int rc = bad ? LM_FAIL(err, LM_E_INPUT, "cannot write the JUnit XML (text that is not valid "
                                            "UTF-8?)")
           : *out == NULL ? LM_FAIL(err, LM_E_NOMEM, "JUnit XML: out of memory")
                          : LM_OK;
    if (rc == LM_OK) {
        memcpy(*out, xmlBufferContent(buf), n_bytes);
        (*out)[n_bytes] = '\0';
        *len = n_bytes;
    }
    xmlBufferFree(buf);
    return rc;
}

int hx_report_write_junit(const hx_report *const *rs, size_t n, bool strict, const char *path,
                          lm_err *err)
{
    return hx_report_write_text(path, hx_report_junit_text, rs, n, strict, err);
}
