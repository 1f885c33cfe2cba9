/* test_hostile_input.c — issue 30's hostile inputs at the unit level: printable()'s escapes of
 * what a terminal would act on (a newline inside a path, the C1 controls U+0080..U+009F in
 * UTF-8, bytes of no well-formed character) against escapes written out here, and the text that
 * must pass as it is (well-formed UTF-8 beyond C1). The CLI's side is tests/cli/
 * test_hostile_input.sh.
 */
#include "ct_test.h"
#include "base/printable.h"

#include <string.h>

static void expect_printable(const char *file, int line, const char *in, const char *want) {
    char buf[256];
    printable(in, buf, sizeof buf);
    if (strcmp(buf, want)) ct_test_fail(file, line, "printable: expected \"%s\", got \"%s\"", want, buf);
}
#define EXPECT_PRINTABLE(in, want) expect_printable(__FILE__, __LINE__, in, want)

CT_TEST(printable_escapes_newline_c1_controls_and_ill_formed_bytes) {
    /* a newline in a path: one line, never a fake "ctrain: ..." line of the log */
    EXPECT_PRINTABLE("data/a\nctrain: done", "data/a\\nctrain: done");
    /* U+009B (CSI) and U+0085 (NEL) in UTF-8: C2 9B, C2 85 */
    EXPECT_PRINTABLE("x\xc2\x9b" "2Jy", "x\\u009b2Jy");
    EXPECT_PRINTABLE("\xc2\x85\xc2\x80\xc2\x9f", "\\u0085\\u0080\\u009f");
    /* a lone C1 byte (CSI to an 8-bit terminal), a cut character, an overlong form */
    EXPECT_PRINTABLE("a\x9b" "b", "a\\x9bb");
    EXPECT_PRINTABLE("a\xe2\x82", "a\\xe2\\x82");
    EXPECT_PRINTABLE("\xc0\xaf", "\\xc0\\xaf");
    /* well-formed text beyond C1 passes: U+00A0, U+00E9, U+20AC (E2 82 AC), U+1F600 */
    EXPECT_PRINTABLE("\xc2\xa0\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\xc2\xa0\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    EXPECT_PRINTABLE("tab\there\x1b[0m", "tab\\there\\e[0m");
    CT_CHECK(has_control_chars("t\xc2\x9bx"));
    CT_CHECK(!has_control_chars("t\xc3\xa9x"));
}

CT_TEST(printable_cuts_short_within_its_buffer) {
    char buf[8];
    printable("\xc2\x9b\xc2\x9b\xc2\x9b", buf, sizeof buf); /* 18 bytes of escapes into 8 */
    size_t n = strlen(buf);
    CT_CHECK_MSG(n < sizeof buf && n >= 3 && !strcmp(buf + n - 3, "..."), "got \"%s\"", buf);
}
