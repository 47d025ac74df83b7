/* Two generated models linked into one program (tests/host/test_two_models_host.py):
 * the target under the default symbols (tllm_model_*), the draft compiled with
 * --symbol-prefix tllm_draft_. Both are greedy-only builds; each decodes the same
 * prompt greedily, their steps interleaved (so neither may touch the other's
 * arenas), and the tokens of each are printed on one line:
 *   two_models MAX_NEW ID...
 * prints "target: ID..." and "draft: ID...". The generated headers would
 * clash (both define TLLM_DIM ...), so the few functions used are declared here. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

float *tllm_model_step(int32_t token, int32_t pos, int need_logits);
int32_t tllm_model_greedy_token(void);
int tllm_weights_check(const char **why);

float *tllm_draft_step(int32_t token, int32_t pos, int need_logits);
int32_t tllm_draft_greedy_token(void);
int tllm_draft_weights_check(const char **why);

typedef struct {
    const char *name;
    float *(*step)(int32_t token, int32_t pos, int need_logits);
    int32_t (*greedy_token)(void);
    int (*weights_check)(const char **why);
} model;

int main(int argc, char **argv) {
    enum { MAX_TOKENS = 512, FIRST_ID = 2 };
    static int32_t out[2][MAX_TOKENS];
    const model models[2] = {{"target", tllm_model_step, tllm_model_greedy_token, tllm_weights_check},
                             {"draft", tllm_draft_step, tllm_draft_greedy_token, tllm_draft_weights_check}};
    if (argc <= FIRST_ID) {
        fprintf(stderr, "usage: %s MAX_NEW ID...\n", argv[0]);
        return 2;
    }
    const int n_prompt = argc - FIRST_ID, max_new = atoi(argv[1]);
    if (max_new < 1 || n_prompt + max_new > MAX_TOKENS) return 2;
    for (int m = 0; m < 2; m++) {
        const char *why = "";
        if (models[m].weights_check(&why) != 0) {
            fprintf(stderr, "%s: %s\n", models[m].name, why);
            return 1;
        }
    }
    for (int p = 0; p < n_prompt; p++)
        for (int m = 0; m < 2; m++) models[m].step(atoi(argv[FIRST_ID + p]), p, p == n_prompt - 1);
    for (int i = 0; i < max_new; i++)
        for (int m = 0; m < 2; m++) {
            out[m][i] = models[m].greedy_token();
            if (i + 1 < max_new) models[m].step(out[m][i], n_prompt + i, 1);
        }
    for (int m = 0; m < 2; m++) {
        printf("%s:", models[m].name);
        for (int i = 0; i < max_new; i++) printf(" %d", (int)out[m][i]);
        printf("\n");
    }
    return 0;
}
